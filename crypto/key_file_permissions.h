// Secret files on disk (a site's long-term secret key, an aggregator's key). Like ssh, fedmesh
// refuses a secret file that other users can read, and creates secret files so that they
// are never readable by anyone else, not even for an instant: the file is created 0600
// under a temporary name, made durable, and only then moved to its final name.
// Public files that travel with a secret one (a site's .pub) are written the same way, only
// with mode 0644, so a directory reader never sees a half-written public key either.
// Reading is checked on the open descriptor, not the path: a key file is opened with
// O_NOFOLLOW (a symbolic link is refused) and its type, owner and mode come from fstat on
// that descriptor, so the file checked is the file read even if its name is swapped meanwhile.
// Thread-safety: all functions are safe to call concurrently; concurrent Write*File calls
// for the same path let exactly one succeed, the others get AlreadyExists.
#pragma once

#include <sys/stat.h>

#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"

namespace fedmesh {

// What an opened key file must satisfy besides being a regular file that is not a link.
enum class KeyFileRule {
  kSecret,  // no permission bit for group or others (mode & 077 == 0), like ssh's keys
  kPublic,  // not writable by group or others, and owned by this process's user or root:
            // whoever can rewrite an enrolled .pub can enroll their own key
  kAny,     // nothing more (reading a header line to tell the kinds apart)
};

// A file or directory open for reading, with the fstat of its descriptor; closes it on
// destruction. Moves, never copies. Made by the Open* functions below.
class CheckedFile {
 public:
  // Takes ownership of `fd`.
  CheckedFile(int fd, const struct stat& st, std::string path)
      : fd_(fd), st_(st), path_(std::move(path)) {}
  CheckedFile(CheckedFile&& other) noexcept;
  CheckedFile& operator=(CheckedFile&& other) noexcept;
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;
  ~CheckedFile();

  int fd() const { return fd_; }
  const struct stat& file_stat() const { return st_; }  // fstat of fd()
  const std::string& path() const { return path_; }     // as shown in messages

 private:
  int fd_ = -1;
  struct stat st_ {};
  std::string path_;
};

// Opens `path` with O_RDONLY | O_NOFOLLOW | O_CLOEXEC (and O_NONBLOCK, so a FIFO cannot hang
// the reader) and checks it with fstat against `rule`. NotFound when it does not exist;
// PermissionDenied naming the path and the fix when it is a symbolic link, when the mode
// breaks `rule` (the chmod that fixes it) or the owner does (the chown); InvalidArgument
// when it is not a regular file.
Result<CheckedFile> OpenKeyFile(const std::string& path, KeyFileRule rule);

// OpenKeyFile for the entry `name` of the open directory `dir` (openat), so a file listed
// in a checked directory is opened there even if the directory's path is swapped.
Result<CheckedFile> OpenKeyFileIn(const CheckedFile& dir, const std::string& name,
                                  KeyFileRule rule);

// Opens the allowlist directory `path` (a symbolic link to it is followed: the directory
// reached is the one checked) and refuses it, PermissionDenied naming it and the fix, when
// group or others can write it or it is owned by a user other than this process's
// effective user or root: whoever can add a file to it can enroll a site.
// NotFound when missing, InvalidArgument when not a directory.
Result<CheckedFile> OpenAllowlistDirectory(const std::string& path);

// OK when `path` is a regular file with no permission bits for group or others.
// NotFound when it does not exist; PermissionDenied, with the chmod command that fixes it,
// when its mode has any bit of 077; InvalidArgument when it is not a regular file.
// A symbolic link is PermissionDenied (OpenKeyFile with KeyFileRule::kSecret).
Status CheckSecretFilePermissions(const std::string& path);

// Creates `path` holding exactly `bytes`, with mode 0600 whatever the umask. Atomic: a
// reader sees either no file or the complete contents, and after OK the contents survive a
// power loss (file and directory are fsynced). Never overwrites: AlreadyExists when `path`
// exists, even if it appears while this call runs. NotFound when the directory is missing.
Status WriteSecretFile(const std::string& path, std::string_view bytes);

// WriteSecretFile for a file meant to be shared (a public key): the same atomic, durable,
// never-overwriting creation, but the file ends up mode 0644 whatever the umask.
Status WritePublicFile(const std::string& path, std::string_view bytes);

}  // namespace fedmesh
