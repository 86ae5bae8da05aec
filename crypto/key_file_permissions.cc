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

Status CheckSecretFilePermissions(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT) return Status::NotFound("secret file " + path + " does not exist");
    return ErrnoStatus(err, "cannot stat secret file " + path);
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(path + " is not a regular file; a secret file must be one");
  }
  const mode_t mode = st.st_mode;
  if ((mode & 077) != 0) {
    // Say what the exposure actually is: a group-writable key is as bad as a readable one
    // (it can be replaced) but "readable" would send the operator looking for the wrong bit.
    const char* access = (mode & 044) != 0   ? "readable"
                         : (mode & 022) != 0 ? "writable"
                                             : "executable";
    return Status::PermissionDenied(path + " is " + access + " by group or others (mode " +
                                    OctalMode(mode) + "); run: chmod 600 " + path);
  }
  return Status::OK();
}

Status WriteSecretFile(const std::string& path, std::string_view bytes) {
  return WriteNewFile(path, bytes, 0600, "secret file");
}

Status WritePublicFile(const std::string& path, std::string_view bytes) {
  return WriteNewFile(path, bytes, 0644, "public file");
}

}  // namespace fedmesh
