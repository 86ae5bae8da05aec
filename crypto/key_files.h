// Key files: how an Identity lives on disk. `fedmesh-keys gen --out DIR/NAME` writes a pair:
//   NAME.key  the whole identity, secrets included; mode 0600, refused when group or
//             others have any access (like ssh's private keys);
//   NAME.pub  the PublicIdentity; mode 0644, the file an operator copies into the
//             aggregator's allowlist directory to enroll the site.
// Both are versioned, line-oriented text (docs/security.md has the full description):
//
//   fedmesh-key v1                      <- "fedmesh-pub v1" in a .pub file
//   # comment lines and blank lines are ignored
//   name = hospital-a
//   curve_public = <40 Z85 characters>  X25519 public key (CurveZMQ)
//   sign_public = <40 Z85 characters>   Ed25519 public key
//   curve_secret = <40 Z85 characters>  .key only: X25519 secret key
//   sign_secret = <40 Z85 characters>   .key only: Ed25519 32-byte seed
//
// Readers are strict: a wrong or missing header, an unknown, repeated or missing field, a
// malformed value, or public keys that do not match the secrets are Corruption naming the
// file and line. Values are never echoed in messages. A secret file is read into secure
// memory and nothing secret is copied out of it.
// Thread-safety: free functions with no shared state, safe to call concurrently.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "crypto/identity.h"

namespace fedmesh {

inline constexpr std::string_view kSecretKeyFileHeader = "fedmesh-key v1";
inline constexpr std::string_view kPublicKeyFileHeader = "fedmesh-pub v1";

// Key files larger than this are refused unread (a v1 file is about 400 bytes).
inline constexpr size_t kMaxKeyFileSize = 64 * 1024;

// PREFIX.key and PREFIX.pub.
std::string SecretKeyPath(const std::string& out_prefix);
std::string PublicKeyPath(const std::string& out_prefix);

// The text of `id`'s .pub file.
std::string FormatPublicIdentity(const PublicIdentity& id);

// Writes `id` to PREFIX.key (mode 0600) and PREFIX.pub (mode 0644), each atomically and
// durably. Writes nothing and returns AlreadyExists when either file exists, so a gen can
// never replace half of a pair; NotFound when the directory is missing; InvalidArgument
// when `out_prefix` is empty or ends in '/'. If the .pub cannot be written after the .key
// was, the .key is removed again so that the call can be retried.
Status WriteIdentity(const std::string& out_prefix, const Identity& id);

// Reads a .key file: OpenKeyFile with KeyFileRule::kSecret (NotFound; PermissionDenied for
// a symbolic link, or with the `chmod 600` fix when group or others have access), then the
// strict parse above.
Result<Identity> ReadIdentity(const std::string& key_path);

// Reads a .pub file: OpenKeyFile with KeyFileRule::kPublic (PermissionDenied for a symbolic
// link, a file group or others can write, or one owned by another user than this process's
// or root), then the strict parse. NotFound when missing, Corruption when malformed; a .key
// given here is Corruption too (read it with ReadIdentity, which checks its permissions).
Result<PublicIdentity> ReadPublicIdentity(const std::string& pub_path);

enum class KeyFileKind { kSecret, kPublic };

// Which kind of key file `path` is, from its header line alone: reads at most 64 bytes,
// into secure memory, and looks only at the first line, which holds no secret. Corruption
// when the header is neither (NotFound, InvalidArgument, and PermissionDenied for a
// symbolic link, as for the readers; the mode and owner are left to the reader).
Result<KeyFileKind> DetectKeyFileKind(const std::string& path);

// Every *.pub in `dir` (not descending into subdirectories, ignoring hidden files and every
// other name), sorted by file name: the sites an aggregator admits. An empty directory
// gives an empty list. NotFound when `dir` is missing, InvalidArgument when it is not a
// directory; PermissionDenied naming the path and the fix when the directory or a .pub in
// it breaks the rules of OpenAllowlistDirectory / KeyFileRule::kPublic (writable by group or
// others, another user's, a .pub that is a symbolic link); each .pub is opened relative to
// the checked directory's descriptor. A malformed .pub fails the whole read with that
// file's error, and two files
// with the same name, curve key or signing key are InvalidArgument naming both, because
// either one would make "who sent this" ambiguous.
Result<std::vector<PublicIdentity>> ReadAllowlist(const std::string& dir);

}  // namespace fedmesh
