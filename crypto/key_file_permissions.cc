#include "crypto/key_file_permissions.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_NOREPLACE (glibc >= 2.28)
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

namespace fedmesh {
namespace {

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string OctalMode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// The OS failure as a Status whose code tells the caller what kind of problem it is.
Status ErrnoStatus(int err, const std::string& what) {
  std::string msg = what + ": " + ErrnoText(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return Status::NotFound(std::move(msg));
    case EACCES:
    case EPERM:
    case EROFS:
      return Status::PermissionDenied(std::move(msg));
    case EEXIST:
      return Status::AlreadyExists(std::move(msg));
    default:
      return Status::IOError(std::move(msg));
  }
}

// Closes on scope exit; the explicit Close() lets the success path check close()'s result,
// which on some file systems is where a deferred write error is reported.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  int Close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Removes the temporary file unless Disarm() is called (after it has been renamed).
class UnlinkOnExit {
 public:
  explicit UnlinkOnExit(std::string path) : path_(std::move(path)) {}
  ~UnlinkOnExit() {
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  UnlinkOnExit(const UnlinkOnExit&) = delete;
  UnlinkOnExit& operator=(const UnlinkOnExit&) = delete;
  void Disarm() { path_.clear(); }

 private:
  std::string path_;
};

Status WriteAll(int fd, std::string_view bytes, const std::string& tmp) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot write " + tmp);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return Status::OK();
}

// Moves tmp to path unless path exists. rename() alone would replace an existing key, so
// use renameat2(RENAME_NOREPLACE), and link() where the file system does not support it;
// both fail with EEXIST atomically, with no window between a check and the move.
// Sets *linked when the fallback left tmp in place as a second name for the file.
Status MoveNoReplace(const std::string& tmp, const std::string& path, const char* kind,
                     bool* linked) {
  *linked = false;
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) {
    return Status::OK();
  }
  int err = errno;
  if (err == EINVAL || err == ENOSYS || err == ENOTSUP) {
    if (::link(tmp.c_str(), path.c_str()) == 0) {
      *linked = true;
      return Status::OK();
    }
    err = errno;
  }
  if (err == EEXIST) {
    return Status::AlreadyExists(path + " already exists; refusing to overwrite a " + kind);
  }
  return ErrnoStatus(err, "cannot move " + tmp + " to " + path);
}

// Creates `path` with exactly `bytes` and mode `mode`, atomically and durably, never
// replacing an existing file. `kind` names the file in messages ("secret file").
Status WriteNewFile(const std::string& path, std::string_view bytes, mode_t mode,
                    const char* kind) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  if (target.filename().empty()) {
    return Status::InvalidArgument(std::string(kind) + " path '" + path +
                                   "' names a directory, not a file");
  }
  // Fail early with a clear message in the common case; MoveNoReplace still closes the race.
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    return Status::AlreadyExists(path + " already exists; refusing to overwrite a " + kind);
  }
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");

  // Same directory as the target so the final rename is atomic (same file system).
  std::string tmp_name(1, '.');  // hidden; appended piecewise to avoid GCC 12's false -Wrestrict
  tmp_name.append(target.filename().string()).append(".tmp-XXXXXX");
  std::string tmp = (dir / tmp_name).string();
  // mkostemp opens with O_CREAT|O_EXCL and mode 0600: the secret is never readable by
  // others, not even between creation and a later chmod.
  int raw_fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (raw_fd < 0) {
    int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return Status::NotFound("cannot create " + path + ": directory " + dir.string() +
                              " does not exist");
    }
    return ErrnoStatus(err, "cannot create a temporary file next to " + path);
  }
  FileDescriptor fd(raw_fd);
  UnlinkOnExit cleanup(tmp);

  // The umask can only remove bits; set exactly `mode` so the owner can read it back (and,
  // for a public file, so can everyone else whatever the umask).
  if (::fchmod(fd.get(), mode) != 0) {
    return ErrnoStatus(errno, "cannot chmod " + OctalMode(mode) + " " + tmp);
  }
  FM_RETURN_IF_ERROR(WriteAll(fd.get(), bytes, tmp));
  // The data must be on disk before the name is: otherwise a crash could leave `path`
  // existing but empty, and a node would fail to start with a truncated key.
  if (::fsync(fd.get()) != 0) return ErrnoStatus(errno, "cannot fsync " + tmp);
  if (fd.Close() != 0) return ErrnoStatus(errno, "cannot close " + tmp);

  bool linked = false;
  FM_RETURN_IF_ERROR(MoveNoReplace(tmp, path, kind, &linked));
  // After a rename the temporary name is free again and may already belong to another
  // writer's mkostemp, so only remove it when link() left it behind.
  cleanup.Disarm();
  if (linked) ::unlink(tmp.c_str());

  // Make the new directory entry durable too.
  int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    return ErrnoStatus(errno,
                       "wrote " + path + " but cannot open " + dir.string() + " to fsync it");
  }
  FileDescriptor dir_guard(dir_fd);
  if (::fsync(dir_fd) != 0) {
    return ErrnoStatus(errno, "wrote " + path + " but cannot fsync directory " + dir.string());
  }
  return Status::OK();
}

}  // namespace

CheckedFile::CheckedFile(CheckedFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), st_(other.st_), path_(std::move(other.path_)) {}

CheckedFile& CheckedFile::operator=(CheckedFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    st_ = other.st_;
    path_ = std::move(other.path_);
  }
  return *this;
}

CheckedFile::~CheckedFile() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// Who may own a file fedmesh trusts: the user it runs as, or root (as for ssh).
Status CheckOwner(const struct stat& st, const std::string& what, const std::string& path) {
  const uid_t me = ::geteuid();
  if (st.st_uid == me || st.st_uid == 0) return Status::OK();
  return Status::PermissionDenied(what + path + " is owned by uid " + std::to_string(st.st_uid) +
                                  ", not by this process's uid " + std::to_string(me) +
                                  " or root, so that user could change what it holds; run: chown " +
                                  std::to_string(me) + " " + path);
}

Status CheckNotWritableByOthers(const struct stat& st, const std::string& what,
                                const std::string& path) {
  if ((st.st_mode & 022) == 0) return Status::OK();
  return Status::PermissionDenied(what + path + " is writable by group or others (mode " +
                                  OctalMode(st.st_mode) +
                                  "), so another user could change what it holds; run: "
                                  "chmod go-w " +
                                  path);
}

Status CheckRule(const struct stat& st, const std::string& path, KeyFileRule rule) {
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(path + " is not a regular file, so it cannot be a key file");
  }
  switch (rule) {
    case KeyFileRule::kSecret:
      if ((st.st_mode & 077) != 0) {
        // Say what the exposure actually is: a group-writable key is as bad as a readable
        // one (it can be replaced) but "readable" would send the operator looking for the
        // wrong bit.
        const char* access = (st.st_mode & 044) != 0   ? "readable"
                             : (st.st_mode & 022) != 0 ? "writable"
                                                       : "executable";
        return Status::PermissionDenied(path + " is " + access + " by group or others (mode " +
                                        OctalMode(st.st_mode) + "); run: chmod 600 " + path);
      }
      return Status::OK();
    case KeyFileRule::kPublic:
      FM_RETURN_IF_ERROR(CheckNotWritableByOthers(st, "", path));
      return CheckOwner(st, "", path);
    case KeyFileRule::kAny:
      return Status::OK();
  }
  return Status::OK();
}

// openat(dir_fd, name) without following a final symbolic link, then the rule on its fstat.
// `shown` is the path in messages.
Result<CheckedFile> OpenAt(int dir_fd, const std::string& name, const std::string& shown,
                           KeyFileRule rule) {
  const int raw_fd =
      ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (raw_fd < 0) {
    const int err = errno;
    if (err == ELOOP) {
      // O_NOFOLLOW: the last component is a link. Its target, or the link itself, may be
      // changed by whoever controls the directory it points into, after any check.
      return Status::PermissionDenied(
          shown +
          " is a symbolic link; key files are not read through links (the target "
          "could be swapped after it was checked): replace it with the file itself, "
          "e.g. cp --remove-destination \"$(readlink -f " +
          shown + ")\" " + shown);
    }
    if (err == ENOENT || err == ENOTDIR) {
      return Status::NotFound("key file " + shown + " does not exist");
    }
    return ErrnoStatus(err, "cannot open key file " + shown);
  }
  struct stat st;
  if (::fstat(raw_fd, &st) != 0) {
    const int err = errno;
    ::close(raw_fd);
    return ErrnoStatus(err, "cannot stat key file " + shown);
  }
  CheckedFile file(raw_fd, st, shown);
  FM_RETURN_IF_ERROR(CheckRule(st, shown, rule));
  return file;
}

}  // namespace

Result<CheckedFile> OpenKeyFile(const std::string& path, KeyFileRule rule) {
  return OpenAt(AT_FDCWD, path, path, rule);
}

Result<CheckedFile> OpenKeyFileIn(const CheckedFile& dir, const std::string& name,
                                  KeyFileRule rule) {
  return OpenAt(dir.fd(), name, (std::filesystem::path(dir.path()) / name).string(), rule);
}

Result<CheckedFile> OpenAllowlistDirectory(const std::string& path) {
  const std::string what = "allowlist directory ";
  const int raw_fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (raw_fd < 0) {
    const int err = errno;
    struct stat st;
    if (err == ENOTDIR && ::stat(path.c_str(), &st) == 0) {
      return Status::InvalidArgument(path +
                                     " is not a directory; the allowlist is a directory of "
                                     ".pub files");
    }
    if (err == ENOENT || err == ENOTDIR) {
      return Status::NotFound(what + path + " does not exist");
    }
    return ErrnoStatus(err, "cannot open " + what + path);
  }
  struct stat st;
  if (::fstat(raw_fd, &st) != 0) {
    const int err = errno;
    ::close(raw_fd);
    return ErrnoStatus(err, "cannot stat " + what + path);
  }
  CheckedFile dir(raw_fd, st, path);
  FM_RETURN_IF_ERROR(CheckNotWritableByOthers(st, what, path));
  FM_RETURN_IF_ERROR(CheckOwner(st, what, path));
  return dir;
}

Status CheckSecretFilePermissions(const std::string& path) {
  return OpenKeyFile(path, KeyFileRule::kSecret).status();
}

Status WriteSecretFile(const std::string& path, std::string_view bytes) {
  return WriteNewFile(path, bytes, 0600, "secret file");
}

Status WritePublicFile(const std::string& path, std::string_view bytes) {
  return WriteNewFile(path, bytes, 0644, "public file");
}

}  // namespace fedmesh
