#include "crypto/key_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <system_error>
#include <utility>

#include "crypto/key_file_permissions.h"
#include "crypto/secure_buffer.h"
#include "crypto/z85.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;

constexpr size_t kKeyTextSize = Z85EncodedSize(32);  // every key in a v1 file: 40 characters

// Field order is the order WriteIdentity emits; readers accept any order.
constexpr std::string_view kName = "name";
constexpr std::string_view kCurvePublic = "curve_public";
constexpr std::string_view kSignPublic = "sign_public";
constexpr std::string_view kCurveSecret = "curve_secret";
constexpr std::string_view kSignSecret = "sign_secret";
constexpr std::array<std::string_view, 3> kPublicFields = {kName, kCurvePublic, kSignPublic};
constexpr std::array<std::string_view, 5> kSecretFields = {kName, kCurvePublic, kSignPublic,
                                                           kCurveSecret, kSignSecret};

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

// A key file's bytes, in secure memory whatever the file: a .key passed where a .pub was
// expected must not leave its secrets in ordinary heap memory.
struct FileText {
  SecureBuffer buffer;
  size_t size = 0;
  std::string_view view() const { return {reinterpret_cast<const char*>(buffer.data()), size}; }
};

// Reads at most `limit` bytes of an opened, checked key file, refusing one larger than
// kMaxKeyFileSize. The size comes from the same fstat that the checks used.
Result<FileText> ReadKeyFile(const CheckedFile& file, size_t limit = kMaxKeyFileSize) {
  const std::string& path = file.path();
  const auto file_size = static_cast<size_t>(file.file_stat().st_size);
  if (file_size > kMaxKeyFileSize) {
    return Status::Corruption(path + " is " + std::to_string(file_size) +
                              " bytes, too large for a key file (at most " +
                              std::to_string(kMaxKeyFileSize) + ")");
  }
  FileText text;
  FM_ASSIGN_OR_RETURN(text.buffer, SecureBuffer::Create(std::min(file_size, limit)));
  char* dst = reinterpret_cast<char*>(text.buffer.data());
  while (text.size < text.buffer.size()) {
    const ssize_t n = ::read(file.fd(), dst + text.size, text.buffer.size() - text.size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError("cannot read key file " + path + ": " + ErrnoText(errno));
    }
    if (n == 0) break;  // the file shrank since fstat; parse what is there
    text.size += static_cast<size_t>(n);
  }
  return text;
}

std::string_view Trim(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view FirstLine(std::string_view text) { return text.substr(0, text.find('\n')); }

// Text read from a file is quoted in messages only when it is short and plain, so that a
// mangled file cannot put a secret or control characters into a log line.
bool Quotable(std::string_view s) {
  if (s.empty() || s.size() > 32) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

std::string At(const std::string& path, int line) {
  return path + ":" + std::to_string(line) + ": ";
}

std::string_view MagicOf(std::string_view header) { return header.substr(0, header.find(' ')); }

// OK when `first_line` is exactly `header`; otherwise a Corruption that says what the file
// is instead (another version, the other kind of key file, or not a key file at all).
Status CheckHeader(std::string_view first_line, const std::string& path, std::string_view header) {
  const std::string_view line = Trim(first_line);
  if (line == header) return Status::OK();
  const std::string_view word = line.substr(0, line.find(' '));
  const std::string_view rest =
      word.size() < line.size() ? Trim(line.substr(word.size())) : std::string_view();
  const std::string_view magic = MagicOf(header);
  const std::string_view version = header.substr(magic.size() + 1);
  if (word == magic) {
    return Status::Corruption(At(path, 1) + "unsupported key file version" +
                              (Quotable(rest) ? " '" + std::string(rest) + "'" : std::string()) +
                              "; this fedmesh reads " + std::string(version) +
                              ", so the file was written by another fedmesh release");
  }
  if (word == MagicOf(kPublicKeyFileHeader)) {
    return Status::Corruption(At(path, 1) +
                              "this is a public key file (fedmesh-pub), but a secret key file "
                              "(fedmesh-key, NAME.key) is needed here");
  }
  if (word == MagicOf(kSecretKeyFileHeader)) {
    return Status::Corruption(At(path, 1) +
                              "this is a secret key file (fedmesh-key), not a public one; keep it "
                              "private and use the matching .pub file here");
  }
  return Status::Corruption(At(path, 1) + "not a fedmesh key file: the first line must be '" +
                            std::string(header) + "'");
}

struct Field {
  std::string_view value;  // points into the text being parsed
  int line = 0;            // 0: absent
};

// Splits `text` into the values of `names` (fields[i] for names[i]), checking the header
// and that every field appears exactly once and nothing else does.
Status ParseFields(std::string_view text, const std::string& path, std::string_view header,
                   std::span<const std::string_view> names, std::span<Field> fields) {
  if (text.empty()) {
    return Status::Corruption(path + " is empty; a fedmesh key file starts with '" +
                              std::string(header) + "'");
  }
  int line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view raw = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line_no == 1) {
      FM_RETURN_IF_ERROR(CheckHeader(raw, path, header));
      continue;
    }
    const std::string_view line = Trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Status::Corruption(At(path, line_no) + "expected a 'field = value' line");
    }
    const std::string_view key = Trim(line.substr(0, eq));
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      return Status::Corruption(At(path, line_no) + "unknown field" +
                                (Quotable(key) ? " '" + std::string(key) + "'" : std::string()) +
                                " in a " + std::string(header) + " file");
    }
    Field& f = fields[static_cast<size_t>(it - names.begin())];
    if (f.line != 0) {
      return Status::Corruption(At(path, line_no) + "field '" + std::string(key) +
                                "' is repeated (first set on line " + std::to_string(f.line) + ")");
    }
    f = Field{Trim(line.substr(eq + 1)), line_no};
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (fields[i].line == 0) {
      return Status::Corruption(path + ": field '" + std::string(names[i]) +
                                "' is missing; the file may be truncated");
    }
  }
  return Status::OK();
}

Status DecodeKey(const Field& f, std::string_view name, const std::string& path,
                 std::span<uint8_t> out) {
  if (f.value.size() != kKeyTextSize) {
    return Status::Corruption(At(path, f.line) + std::string(name) + " must be " +
                              std::to_string(kKeyTextSize) + " Z85 characters, not " +
                              std::to_string(f.value.size()));
  }
  if (!Z85Decode(f.value, out)) {
    return Status::Corruption(At(path, f.line) + std::string(name) +
                              " is not valid Z85 text (a character outside the Z85 alphabet, "
                              "or a group out of range)");
  }
  return Status::OK();
}

// Fills `pub` from the first three fields (name, curve_public, sign_public).
Status DecodePublicFields(std::span<const Field> fields, const std::string& path,
                          PublicIdentity* pub) {
  if (Status s = ValidateSiteName(fields[0].value); !s.ok()) {
    return Status::Corruption(At(path, fields[0].line) + s.message());
  }
  pub->name = std::string(fields[0].value);
  FM_RETURN_IF_ERROR(DecodeKey(fields[1], kCurvePublic, path, pub->curve_public));
  FM_RETURN_IF_ERROR(DecodeKey(fields[2], kSignPublic, path, pub->sign_public));
  return Status::OK();
}

// The lines every file has: header, a comment for the human who opens it, the public part.
std::string PublicPart(std::string_view header, std::string_view comment,
                       const PublicIdentity& id) {
  std::string text;
  text.append(header).append("\n");
  text.append(comment);
  text.append(kName).append(" = ").append(id.name).append("\n");
  text.append(kCurvePublic).append(" = ").append(id.curve_public_z85()).append("\n");
  text.append(kSignPublic).append(" = ").append(id.sign_public_z85()).append("\n");
  return text;
}

// Appends to a fixed-size SecureBuffer, so that the secret text is only ever built there.
class SecureText {
 public:
  explicit SecureText(SecureBuffer* buffer)
      : buf_(reinterpret_cast<char*>(buffer->data()), buffer->size()) {}
  void Append(std::string_view s) {
    std::memcpy(buf_.data() + used_, s.data(), s.size());
    used_ += s.size();
  }
  void AppendZ85(std::span<const uint8_t> bytes) {
    Z85Encode(bytes, buf_.subspan(used_, Z85EncodedSize(bytes.size())));
    used_ += Z85EncodedSize(bytes.size());
  }
  std::string_view view() const { return {buf_.data(), used_}; }

 private:
  std::span<char> buf_;
  size_t used_ = 0;
};

}  // namespace

std::string SecretKeyPath(const std::string& out_prefix) { return out_prefix + ".key"; }
std::string PublicKeyPath(const std::string& out_prefix) { return out_prefix + ".pub"; }

std::string FormatPublicIdentity(const PublicIdentity& id) {
  return PublicPart(kPublicKeyFileHeader,
                    "# fedmesh public identity of site '" + id.name +
                        "'. Safe to share: the federation operator\n"
                        "# enrolls the site by copying this file into the allowlist directory.\n",
                    id);
}

Status WriteIdentity(const std::string& out_prefix, const Identity& id) {
  if (out_prefix.empty() || out_prefix.back() == '/') {
    return Status::InvalidArgument("key file prefix '" + out_prefix +
                                   "' must end in a file name, as in keys/site-a");
  }
  const std::string key_path = SecretKeyPath(out_prefix);
  const std::string pub_path = PublicKeyPath(out_prefix);
  // Both checked before either is written: a gen that stopped at one file would leave a
  // .key whose .pub belongs to another identity, or the reverse.
  for (const std::string& p : {key_path, pub_path}) {
    struct stat st;
    if (::lstat(p.c_str(), &st) == 0) {
      return Status::AlreadyExists(p + " already exists; refusing to overwrite a key file");
    }
  }

  const PublicIdentity& pub = id.public_identity();
  const std::string head =
      PublicPart(kSecretKeyFileHeader,
                 "# fedmesh SECRET identity of site '" + pub.name +
                     "'. Keep it mode 0600 and on this host only;\n"
                     "# give the matching .pub file to the federation operator instead.\n",
                 pub);
  const std::string curve_label = std::string(kCurveSecret) + " = ";
  const std::string sign_label = std::string(kSignSecret) + " = ";
  const size_t size =
      head.size() + curve_label.size() + kKeyTextSize + 1 + sign_label.size() + kKeyTextSize + 1;
  FM_ASSIGN_OR_RETURN(SecureBuffer buffer, SecureBuffer::Create(size));
  SecureText text(&buffer);
  text.Append(head);
  text.Append(curve_label);
  text.AppendZ85(id.curve_secret());
  text.Append("\n");
  text.Append(sign_label);
  text.AppendZ85(id.sign_seed());
  text.Append("\n");

  FM_RETURN_IF_ERROR(WriteSecretFile(key_path, text.view()));
  Status s = WritePublicFile(pub_path, FormatPublicIdentity(pub));
  if (!s.ok()) {
    ::unlink(key_path.c_str());
    return Status(s.code(), s.message() + " (" + key_path + " was removed again)");
  }
  return Status::OK();
}

Result<Identity> ReadIdentity(const std::string& key_path) {
  FM_ASSIGN_OR_RETURN(const CheckedFile file, OpenKeyFile(key_path, KeyFileRule::kSecret));
  FM_ASSIGN_OR_RETURN(const FileText text, ReadKeyFile(file));
  std::array<Field, kSecretFields.size()> fields;
  FM_RETURN_IF_ERROR(
      ParseFields(text.view(), key_path, kSecretKeyFileHeader, kSecretFields, fields));
  PublicIdentity pub;
  FM_RETURN_IF_ERROR(DecodePublicFields(fields, key_path, &pub));
  FM_ASSIGN_OR_RETURN(SecureBuffer curve_secret, SecureBuffer::Create(kCurveKeySize));
  FM_ASSIGN_OR_RETURN(SecureBuffer sign_seed, SecureBuffer::Create(kSignSeedSize));
  FM_RETURN_IF_ERROR(DecodeKey(fields[3], kCurveSecret, key_path, curve_secret.span()));
  FM_RETURN_IF_ERROR(DecodeKey(fields[4], kSignSecret, key_path, sign_seed.span()));
  FM_ASSIGN_OR_RETURN(Identity id,
                      Identity::FromSecrets(pub.name, curve_secret.span(), sign_seed.span()));
  // The stored public keys are redundant with the secrets; a mismatch means the file was
  // edited or pieced together, and the .pub given out may not be this key's.
  if (id.public_identity().curve_public != pub.curve_public) {
    return Status::Corruption(At(key_path, fields[1].line) +
                              "curve_public does not match curve_secret; the file was altered "
                              "or mixes two identities");
  }
  if (id.public_identity().sign_public != pub.sign_public) {
    return Status::Corruption(At(key_path, fields[2].line) +
                              "sign_public does not match sign_secret; the file was altered or "
                              "mixes two identities");
  }
  return id;
}

namespace {

Result<PublicIdentity> ParsePublicIdentity(const CheckedFile& file) {
  const std::string& pub_path = file.path();
  FM_ASSIGN_OR_RETURN(const FileText text, ReadKeyFile(file));
  std::array<Field, kPublicFields.size()> fields;
  FM_RETURN_IF_ERROR(
      ParseFields(text.view(), pub_path, kPublicKeyFileHeader, kPublicFields, fields));
  PublicIdentity pub;
  FM_RETURN_IF_ERROR(DecodePublicFields(fields, pub_path, &pub));
  return pub;
}

}  // namespace

Result<PublicIdentity> ReadPublicIdentity(const std::string& pub_path) {
  FM_ASSIGN_OR_RETURN(const CheckedFile file, OpenKeyFile(pub_path, KeyFileRule::kPublic));
  return ParsePublicIdentity(file);
}

Result<KeyFileKind> DetectKeyFileKind(const std::string& path) {
  // Only the first line matters; a hand-edited file might put anything after it.
  FM_ASSIGN_OR_RETURN(const CheckedFile file, OpenKeyFile(path, KeyFileRule::kAny));
  FM_ASSIGN_OR_RETURN(const FileText text, ReadKeyFile(file, 64));
  if (text.size == 0) {
    return Status::Corruption(path + " is empty; a fedmesh key file starts with '" +
                              std::string(kSecretKeyFileHeader) + "' or '" +
                              std::string(kPublicKeyFileHeader) + "'");
  }
  const std::string_view first = Trim(FirstLine(text.view()));
  if (first == kSecretKeyFileHeader) return KeyFileKind::kSecret;
  if (first == kPublicKeyFileHeader) return KeyFileKind::kPublic;
  const bool looks_public = first.substr(0, first.find(' ')) == MagicOf(kPublicKeyFileHeader);
  return CheckHeader(first, path, looks_public ? kPublicKeyFileHeader : kSecretKeyFileHeader);
}

Result<std::vector<PublicIdentity>> ReadAllowlist(const std::string& dir) {
  // Everything below goes through this descriptor: the directory checked is the one listed,
  // and every .pub is opened in it.
  FM_ASSIGN_OR_RETURN(const CheckedFile checked_dir, OpenAllowlistDirectory(dir));
  std::vector<std::string> names;
  {
    // fdopendir takes ownership of the descriptor it is given, so give it a duplicate.
    const int list_fd = ::fcntl(checked_dir.fd(), F_DUPFD_CLOEXEC, 0);
    DIR* listing = list_fd < 0 ? nullptr : ::fdopendir(list_fd);
    if (listing == nullptr) {
      const int err = errno;
      if (list_fd >= 0) ::close(list_fd);
      return Status::IOError("cannot list allowlist directory " + dir + ": " + ErrnoText(err));
    }
    std::unique_ptr<DIR, int (*)(DIR*)> guard(listing, ::closedir);
    for (;;) {
      errno = 0;
      const dirent* entry = ::readdir(listing);
      if (entry == nullptr) {
        if (errno != 0) {
          return Status::IOError("cannot list allowlist directory " + dir + ": " +
                                 ErrnoText(errno));
        }
        break;
      }
      const std::string name = entry->d_name;
      // Hidden names include WritePublicFile's temporaries; they are never enrollments.
      if (name.empty() || name.front() == '.' || fs::path(name).extension() != ".pub") continue;
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());

  std::vector<PublicIdentity> ids;
  std::vector<std::string> origin;  // origin[i]: the file ids[i] came from
  for (const std::string& name : names) {
    FM_ASSIGN_OR_RETURN(const CheckedFile file,
                        OpenKeyFileIn(checked_dir, name, KeyFileRule::kPublic));
    FM_ASSIGN_OR_RETURN(PublicIdentity id, ParsePublicIdentity(file));
    for (size_t i = 0; i < ids.size(); ++i) {
      const char* same = ids[i].curve_public == id.curve_public ? "curve public key"
                         : ids[i].sign_public == id.sign_public ? "signing public key"
                         : ids[i].name == id.name               ? "site name"
                                                                : nullptr;
      if (same != nullptr) {
        return Status::InvalidArgument(origin[i] + " and " + file.path() + " have the same " +
                                       same + "; remove one of them from the allowlist");
      }
    }
    ids.push_back(std::move(id));
    origin.push_back(file.path());
  }
  return ids;
}

}  // namespace fedmesh
