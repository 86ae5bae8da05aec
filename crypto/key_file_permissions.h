// Secret files on disk (a site's long-term secret key, an aggregator's key). Like ssh, fedmesh
// refuses a secret file that other users can read, and creates secret files so that they
// are never readable by anyone else, not even for an instant: the file is created 0600
// under a temporary name, made durable, and only then moved to its final name.
// Public files that travel with a secret one (a site's .pub) are written the same way, only
// with mode 0644, so a directory reader never sees a half-written public key either.
// Thread-safety: all functions are safe to call concurrently; concurrent Write*File calls
// for the same path let exactly one succeed, the others get AlreadyExists.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace fedmesh {

// OK when `path` is a regular file with no permission bits for group or others.
// NotFound when it does not exist; PermissionDenied, with the chmod command that fixes it,
// when its mode has any bit of 077; InvalidArgument when it is not a regular file.
// Symbolic links are followed: the target's mode is what protects the secret.
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
