// Key files: round trips, modes, refusal to overwrite, the permission check, strict parsing
// with file:line messages that never echo a value, and allowlist directories.
#include "crypto/key_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "crypto/z85.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// Line numbers in the files WriteIdentity emits (comments on lines 2 and 3).
constexpr int kNameLine = 4;
constexpr int kCurvePublicLine = 5;
constexpr int kSignPublicLine = 6;
constexpr int kCurveSecretLine = 7;
constexpr int kSignSecretLine = 8;

class KeyFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "fedmesh_keyfiles_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  static Identity Generate(const std::string& name) {
    Result<Identity> id = Identity::Generate(name);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return std::move(id).value();
  }
  // Generates `name` and writes PREFIX.key/.pub under the test directory.
  Identity GenerateTo(const std::string& prefix, const std::string& name) {
    Identity id = Generate(name);
    Status s = WriteIdentity(Path(prefix), id);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return id;
  }
  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static void WriteWithMode(const std::string& path, const std::string& bytes, mode_t mode) {
    fs::remove(path);
    std::ofstream(path, std::ios::binary) << bytes;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
  }
  static mode_t ModeOf(const std::string& path) {
    struct stat st;
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }
  static std::vector<std::string> Lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  static std::string Join(const std::vector<std::string>& lines) {
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    return text;
  }
  // The value on a "field = value" line.
  static std::string ValueOf(const std::string& line) { return line.substr(line.find('=') + 2); }

  // The lines of one valid .key file (the same on every call), for tests to mangle.
  std::vector<std::string> ValidKeyLines() {
    if (valid_lines_.empty()) {
      GenerateTo("valid", "site-a");
      valid_lines_ = Lines(ReadAll(Path("valid.key")));
    }
    return valid_lines_;
  }
  // Writes `text` as a 0600 key file and expects ReadIdentity to fail with Corruption whose
  // message names the file (and `line`, when given) and contains `what`.
  void ExpectCorruptKey(const std::string& text, int line, const std::string& what) {
    const std::string path = Path("bad.key");
    WriteWithMode(path, text, 0600);
    Result<Identity> id = ReadIdentity(path);
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().code(), StatusCode::kCorruption) << id.status().ToString();
    const std::string where = line > 0 ? path + ":" + std::to_string(line) + ": " : path;
    EXPECT_THAT(id.status().message(), HasSubstr(where));
    EXPECT_THAT(id.status().message(), HasSubstr(what));
  }

  fs::path dir_;
  std::vector<std::string> valid_lines_;
};

TEST_F(KeyFilesTest, WriteThenReadRoundTripsTheIdentity) {
  Identity written = GenerateTo("site-a", "site-a");
  Result<Identity> read = ReadIdentity(Path("site-a.key"));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->public_identity(), written.public_identity());
  EXPECT_TRUE(std::ranges::equal(read->curve_secret(), written.curve_secret()));
  EXPECT_TRUE(std::ranges::equal(read->sign_seed(), written.sign_seed()));
  // The key read back signs for the public key that was given out.
  const std::vector<uint8_t> msg = {1, 2, 3};
  EXPECT_TRUE(VerifySignature(written.public_identity(), msg, *read->Sign(msg)));

  Result<PublicIdentity> pub = ReadPublicIdentity(Path("site-a.pub"));
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  EXPECT_EQ(*pub, written.public_identity());
}

TEST_F(KeyFilesTest, FilesFollowTheDocumentedFormat) {
  Identity id = GenerateTo("site-a", "site-a");
  const PublicIdentity& pub = id.public_identity();
  const auto key = Lines(ReadAll(Path("site-a.key")));
  ASSERT_EQ(key.size(), 8u);
  EXPECT_EQ(key[0], "fedmesh-key v1");
  EXPECT_EQ(key[kNameLine - 1], "name = site-a");
  EXPECT_EQ(key[kCurvePublicLine - 1], "curve_public = " + pub.curve_public_z85());
  EXPECT_EQ(key[kSignPublicLine - 1], "sign_public = " + pub.sign_public_z85());
  EXPECT_EQ(key[kCurveSecretLine - 1], "curve_secret = " + id.curve_secret_z85());
  EXPECT_EQ(key[kSignSecretLine - 1], "sign_secret = " + Z85Encode(id.sign_seed()));

  const std::string pub_text = ReadAll(Path("site-a.pub"));
  EXPECT_EQ(pub_text, FormatPublicIdentity(pub));
  const auto pub_lines = Lines(pub_text);
  ASSERT_EQ(pub_lines.size(), 6u);
  EXPECT_EQ(pub_lines[0], "fedmesh-pub v1");
  EXPECT_EQ(pub_lines[3], "name = site-a");
  EXPECT_EQ(pub_lines[4], "curve_public = " + pub.curve_public_z85());
  EXPECT_EQ(pub_lines[5], "sign_public = " + pub.sign_public_z85());
  EXPECT_THAT(pub_text, Not(HasSubstr("secret =")));
  EXPECT_THAT(pub_text, Not(HasSubstr(id.curve_secret_z85())));
}

TEST_F(KeyFilesTest, KeyIsMode0600AndPubIs0644WhateverTheUmask) {
  for (mode_t mask : {mode_t{0}, mode_t{022}, mode_t{077}}) {
    const mode_t old = ::umask(mask);
    const std::string prefix = "site-" + std::to_string(mask);
    GenerateTo(prefix, "site-a");
    ::umask(old);
    EXPECT_EQ(ModeOf(Path(prefix + ".key")), 0600u) << "umask " << mask;
    EXPECT_EQ(ModeOf(Path(prefix + ".pub")), 0644u) << "umask " << mask;
  }
}

TEST_F(KeyFilesTest, RefusesToOverwriteAnExistingPair) {
  GenerateTo("site-a", "site-a");
  const std::string key_before = ReadAll(Path("site-a.key"));
  const std::string pub_before = ReadAll(Path("site-a.pub"));
  Status s = WriteIdentity(Path("site-a"), Generate("site-a"));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr(Path("site-a.key")));
  EXPECT_EQ(ReadAll(Path("site-a.key")), key_before);
  EXPECT_EQ(ReadAll(Path("site-a.pub")), pub_before);
}

TEST_F(KeyFilesTest, RefusesWhenOnlyThePubExistsAndWritesNothing) {
  WriteWithMode(Path("site-a.pub"), "someone else's public key\n", 0644);
  Status s = WriteIdentity(Path("site-a"), Generate("site-a"));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr(Path("site-a.pub")));
  EXPECT_FALSE(fs::exists(Path("site-a.key")));
  EXPECT_EQ(ReadAll(Path("site-a.pub")), "someone else's public key\n");
}

TEST_F(KeyFilesTest, RefusesWhenOnlyTheKeyExistsAndWritesNothing) {
  WriteWithMode(Path("site-a.key"), "old secret\n", 0600);
  Status s = WriteIdentity(Path("site-a"), Generate("site-a"));
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr(Path("site-a.key")));
  EXPECT_FALSE(fs::exists(Path("site-a.pub")));
  EXPECT_EQ(ReadAll(Path("site-a.key")), "old secret\n");
}

TEST_F(KeyFilesTest, WriteIntoMissingDirectoryIsNotFoundAndLeavesNothing) {
  Status s = WriteIdentity(Path("no/such/dir/site-a"), Generate("site-a"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_FALSE(fs::exists(Path("no")));
}

TEST_F(KeyFilesTest, PrefixMustNameAFile) {
  EXPECT_EQ(WriteIdentity("", Generate("a")).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteIdentity(Path("keys/"), Generate("a")).code(), StatusCode::kInvalidArgument);
}

TEST_F(KeyFilesTest, WorldReadableKeyIsRefusedWithTheChmodFix) {
  GenerateTo("site-a", "site-a");
  const std::string key = Path("site-a.key");
  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  Result<Identity> id = ReadIdentity(key);
  EXPECT_EQ(id.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(id.status().message(), HasSubstr("chmod 600 " + key));
  EXPECT_THAT(id.status().message(), HasSubstr("mode 0644"));

  ASSERT_EQ(::chmod(key.c_str(), 0640), 0);
  EXPECT_EQ(ReadIdentity(key).status().code(), StatusCode::kPermissionDenied);
  ASSERT_EQ(::chmod(key.c_str(), 0604), 0);
  EXPECT_EQ(ReadIdentity(key).status().code(), StatusCode::kPermissionDenied);

  ASSERT_EQ(::chmod(key.c_str(), 0600), 0);  // the suggested fix works
  EXPECT_TRUE(ReadIdentity(key).ok());
  ASSERT_EQ(::chmod(key.c_str(), 0400), 0);
  EXPECT_TRUE(ReadIdentity(key).ok());
}

// Issue 26 item 9: a link is refused, not followed, whatever its target's mode: the target
// (or the link) could be replaced after the check, and the message says how to fix it.
TEST_F(KeyFilesTest, SymlinkedKeyAndPubAreRefusedNamingThePath) {
  GenerateTo("site-a", "site-a");
  const std::string key_link = Path("link.key");
  const std::string pub_link = Path("link.pub");
  ASSERT_EQ(::symlink(Path("site-a.key").c_str(), key_link.c_str()), 0);
  ASSERT_EQ(::symlink(Path("site-a.pub").c_str(), pub_link.c_str()), 0);

  Result<Identity> id = ReadIdentity(key_link);
  EXPECT_EQ(id.status().code(), StatusCode::kPermissionDenied) << id.status().ToString();
  EXPECT_THAT(id.status().message(), HasSubstr(key_link + " is a symbolic link"));
  EXPECT_THAT(id.status().message(), HasSubstr("replace it with the file itself"));

  Result<PublicIdentity> pub = ReadPublicIdentity(pub_link);
  EXPECT_EQ(pub.status().code(), StatusCode::kPermissionDenied) << pub.status().ToString();
  EXPECT_THAT(pub.status().message(), HasSubstr(pub_link + " is a symbolic link"));

  EXPECT_EQ(DetectKeyFileKind(key_link).status().code(), StatusCode::kPermissionDenied);
  // The files themselves are fine.
  EXPECT_TRUE(ReadIdentity(Path("site-a.key")).ok());
  EXPECT_TRUE(ReadPublicIdentity(Path("site-a.pub")).ok());
}

// Issue 26 item 9: a .pub anyone else can rewrite lets them swap in their own key.
TEST_F(KeyFilesTest, WritablePubIsRefusedWithTheChmodFix) {
  GenerateTo("site-a", "site-a");
  const std::string pub = Path("site-a.pub");
  for (mode_t mode : {mode_t{0646}, mode_t{0664}}) {
    ASSERT_EQ(::chmod(pub.c_str(), mode), 0);
    Result<PublicIdentity> read = ReadPublicIdentity(pub);
    EXPECT_EQ(read.status().code(), StatusCode::kPermissionDenied) << std::oct << mode;
    EXPECT_THAT(read.status().message(), HasSubstr(pub + " is writable by group or others"));
    EXPECT_THAT(read.status().message(), HasSubstr("run: chmod go-w " + pub));
  }
  ASSERT_EQ(::chmod(pub.c_str(), 0644), 0);  // readable by everyone is the point of a .pub
  EXPECT_TRUE(ReadPublicIdentity(pub).ok());
}

TEST_F(KeyFilesTest, MissingFilesAreNotFound) {
  EXPECT_EQ(ReadIdentity(Path("absent.key")).status().code(), StatusCode::kNotFound);
  Result<PublicIdentity> pub = ReadPublicIdentity(Path("absent.pub"));
  EXPECT_EQ(pub.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(pub.status().message(), HasSubstr(Path("absent.pub")));
}

TEST_F(KeyFilesTest, CommentsBlankLinesCrlfAndFieldOrderAreAccepted) {
  Identity id = GenerateTo("site-a", "site-a");
  auto lines = Lines(ReadAll(Path("site-a.key")));
  std::string text = lines[0] + "\r\n\r\n# rotated 2026-01-01\r\n";
  for (int i = kSignSecretLine; i >= kNameLine; --i) text += "  " + lines[i - 1] + "  \r\n";
  WriteWithMode(Path("edited.key"), text, 0600);
  Result<Identity> read = ReadIdentity(Path("edited.key"));
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->public_identity(), id.public_identity());
}

TEST_F(KeyFilesTest, EmptyKeyFileIsCorruption) { ExpectCorruptKey("", 0, "is empty"); }

TEST_F(KeyFilesTest, TruncatedKeyFileIsCorruption) {
  const auto lines = ValidKeyLines();
  // Cut after the public lines: the secrets are missing.
  ExpectCorruptKey(Join({lines.begin(), lines.begin() + kSignPublicLine}), 0,
                   "field 'curve_secret' is missing");
  // Cut in the middle of the last value.
  const std::string full = Join(lines);
  ExpectCorruptKey(full.substr(0, full.size() - 15), kSignSecretLine,
                   "sign_secret must be 40 Z85 characters, not 26");
  // Only the header.
  ExpectCorruptKey(lines[0] + "\n", 0, "is missing");
}

TEST_F(KeyFilesTest, WrongHeaderVersionIsCorruption) {
  auto lines = ValidKeyLines();
  lines[0] = "fedmesh-key v2";
  ExpectCorruptKey(Join(lines), 1, "unsupported key file version 'v2'; this fedmesh reads v1");
}

TEST_F(KeyFilesTest, FileWithoutTheHeaderIsCorruption) {
  auto lines = ValidKeyLines();
  lines.erase(lines.begin());
  ExpectCorruptKey(Join(lines), 1, "not a fedmesh key file");
}

TEST_F(KeyFilesTest, PubGivenAsKeyIsCorruption) {
  GenerateTo("site-a", "site-a");
  ExpectCorruptKey(ReadAll(Path("site-a.pub")), 1, "this is a public key file");
}

TEST_F(KeyFilesTest, BadZ85IsCorruptionAndTheValueIsNotEchoed) {
  auto lines = ValidKeyLines();
  const std::string secret = ValueOf(lines[kCurveSecretLine - 1]);
  std::string bad = secret;
  bad[10] = '~';  // not in the Z85 alphabet
  lines[kCurveSecretLine - 1] = "curve_secret = " + bad;
  const std::string path = Path("bad.key");
  WriteWithMode(path, Join(lines), 0600);
  Result<Identity> id = ReadIdentity(path);
  EXPECT_EQ(id.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(id.status().message(), HasSubstr(path + ":" + std::to_string(kCurveSecretLine) +
                                               ": curve_secret is not valid Z85"));
  EXPECT_THAT(id.status().message(), Not(HasSubstr(bad)));
  EXPECT_THAT(id.status().message(), Not(HasSubstr(secret.substr(0, 10))));

  lines = ValidKeyLines();
  lines[kSignPublicLine - 1] = "sign_public = " + std::string(40, '#');  // group > 2^32
  ExpectCorruptKey(Join(lines), kSignPublicLine, "sign_public is not valid Z85");
}

TEST_F(KeyFilesTest, WrongLengthValueIsCorruption) {
  auto lines = ValidKeyLines();
  lines[kCurvePublicLine - 1] += "abcde";
  ExpectCorruptKey(Join(lines), kCurvePublicLine, "curve_public must be 40 Z85 characters, not 45");
}

TEST_F(KeyFilesTest, PublicKeyNotMatchingTheSecretIsCorruption) {
  const Identity other = Generate("other");
  auto lines = ValidKeyLines();
  lines[kCurvePublicLine - 1] = "curve_public = " + other.public_identity().curve_public_z85();
  ExpectCorruptKey(Join(lines), kCurvePublicLine, "curve_public does not match curve_secret");

  lines = ValidKeyLines();
  lines[kSignPublicLine - 1] = "sign_public = " + other.public_identity().sign_public_z85();
  ExpectCorruptKey(Join(lines), kSignPublicLine, "sign_public does not match sign_secret");

  // A secret swapped in from another identity is caught the same way.
  lines = ValidKeyLines();
  lines[kSignSecretLine - 1] = "sign_secret = " + Z85Encode(other.sign_seed());
  ExpectCorruptKey(Join(lines), kSignPublicLine, "sign_public does not match sign_secret");
}

TEST_F(KeyFilesTest, UnknownFieldIsCorruption) {
  auto lines = ValidKeyLines();
  lines.push_back("colour = blue");
  ExpectCorruptKey(Join(lines), 9, "unknown field 'colour'");
}

TEST_F(KeyFilesTest, RepeatedFieldIsCorruption) {
  auto lines = ValidKeyLines();
  lines.push_back(lines[kNameLine - 1]);
  ExpectCorruptKey(Join(lines), 9, "field 'name' is repeated (first set on line 4)");
}

TEST_F(KeyFilesTest, LineWithoutEqualsIsCorruption) {
  auto lines = ValidKeyLines();
  lines.insert(lines.begin() + 3, "just some words");
  ExpectCorruptKey(Join(lines), 4, "expected a 'field = value' line");
}

TEST_F(KeyFilesTest, BadSiteNameIsCorruption) {
  auto lines = ValidKeyLines();
  lines[kNameLine - 1] = "name = site a";
  ExpectCorruptKey(Join(lines), kNameLine, "may only contain letters, digits");
}

TEST_F(KeyFilesTest, OversizedFileIsRefusedUnread) {
  auto lines = ValidKeyLines();
  std::string text = Join(lines) + "# " + std::string(kMaxKeyFileSize, 'x') + "\n";
  ExpectCorruptKey(text, 0, "too large for a key file");
}

TEST_F(KeyFilesTest, KeyGivenAsPubIsCorruptionWithoutEchoingSecrets) {
  Identity id = GenerateTo("site-a", "site-a");
  Result<PublicIdentity> pub = ReadPublicIdentity(Path("site-a.key"));
  EXPECT_EQ(pub.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(pub.status().message(), HasSubstr(Path("site-a.key") + ":1: "));
  EXPECT_THAT(pub.status().message(), HasSubstr("secret key file"));
  EXPECT_THAT(pub.status().message(), Not(HasSubstr(id.curve_secret_z85())));
}

TEST_F(KeyFilesTest, CorruptPubFileIsCorruptionWithLine) {
  GenerateTo("site-a", "site-a");
  auto lines = Lines(ReadAll(Path("site-a.pub")));
  lines.push_back("curve_secret = " + std::string(40, '0'));  // secrets do not belong here
  WriteWithMode(Path("bad.pub"), Join(lines), 0644);
  Result<PublicIdentity> pub = ReadPublicIdentity(Path("bad.pub"));
  EXPECT_EQ(pub.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(pub.status().message(),
              HasSubstr(Path("bad.pub") + ":7: unknown field 'curve_secret'"));
}

TEST_F(KeyFilesTest, DetectKeyFileKindReadsTheHeader) {
  GenerateTo("site-a", "site-a");
  EXPECT_EQ(*DetectKeyFileKind(Path("site-a.key")), KeyFileKind::kSecret);
  EXPECT_EQ(*DetectKeyFileKind(Path("site-a.pub")), KeyFileKind::kPublic);
  // By header, not by name.
  fs::copy_file(Path("site-a.pub"), Path("renamed.key"));
  EXPECT_EQ(*DetectKeyFileKind(Path("renamed.key")), KeyFileKind::kPublic);

  WriteWithMode(Path("v9.pub"), "fedmesh-pub v9\n", 0644);
  Result<KeyFileKind> v9 = DetectKeyFileKind(Path("v9.pub"));
  EXPECT_EQ(v9.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(v9.status().message(), HasSubstr("unsupported key file version 'v9'"));
  WriteWithMode(Path("junk"), "ssh-ed25519 AAAA\n", 0644);
  EXPECT_EQ(DetectKeyFileKind(Path("junk")).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(DetectKeyFileKind(Path("absent")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(DetectKeyFileKind(dir_.string()).status().code(), StatusCode::kInvalidArgument);
}

class AllowlistTest : public KeyFilesTest {
 protected:
  void SetUp() override {
    KeyFilesTest::SetUp();
    fs::create_directory(dir_ / "allow");
    // Explicit, so that the tests do not depend on the umask (002 would make it
    // group-writable, which ReadAllowlist refuses).
    ASSERT_EQ(::chmod(Allow().c_str(), 0755), 0);
  }
  // Only root can chown a file to another user.
  static bool IsRoot() { return ::geteuid() == 0; }
  static constexpr uid_t kNobody = 65534;
  // Generates a site and puts only its .pub into allow/.
  PublicIdentity Enroll(const std::string& file, const std::string& name) {
    Identity id = GenerateTo(name + "-keys", name);
    fs::copy_file(Path(name + "-keys.pub"), dir_ / "allow" / file);
    return id.public_identity();
  }
  std::string Allow() const { return (dir_ / "allow").string(); }
};

TEST_F(AllowlistTest, ReadsEveryPubSortedByFileName) {
  const PublicIdentity c = Enroll("c.pub", "site-c");
  const PublicIdentity a = Enroll("a.pub", "site-a");
  const PublicIdentity b = Enroll("b.pub", "site-b");
  // Not enrollments: other extensions, hidden files, subdirectories.
  WriteWithMode(Allow() + "/README", "enrolled sites\n", 0644);
  fs::copy_file(Path("site-a-keys.key"), Allow() + "/site-a.key");
  WriteWithMode(Allow() + "/.x.pub.tmp-123456", "partial", 0600);
  WriteWithMode(Allow() + "/.hidden.pub", "junk", 0644);
  fs::create_directory(dir_ / "allow" / "old");
  fs::copy_file(Path("site-a-keys.pub"), dir_ / "allow" / "old" / "a.pub");

  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ((*ids)[0], a);
  EXPECT_EQ((*ids)[1], b);
  EXPECT_EQ((*ids)[2], c);
}

TEST_F(AllowlistTest, EmptyDirectoryGivesAnEmptyList) {
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(ids->empty());
}

TEST_F(AllowlistTest, BadFileFailsTheReadNamingIt) {
  Enroll("a.pub", "site-a");
  Enroll("b.pub", "site-b");
  WriteWithMode(Allow() + "/broken.pub", "fedmesh-pub v1\nname = x\n", 0644);
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  EXPECT_EQ(ids.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(ids.status().message(), HasSubstr(Allow() + "/broken.pub"));
  EXPECT_THAT(ids.status().message(), HasSubstr("field 'curve_public' is missing"));
}

TEST_F(AllowlistTest, SecretKeyNamedPubIsRefused) {
  Enroll("a.pub", "site-a");
  GenerateTo("leak", "leak");
  fs::copy_file(Path("leak.key"), Allow() + "/leak.pub");
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  EXPECT_EQ(ids.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(ids.status().message(), HasSubstr(Allow() + "/leak.pub:1: "));
}

TEST_F(AllowlistTest, DuplicateKeyIsAnErrorNamingBothFiles) {
  Enroll("a.pub", "site-a");
  Enroll("b.pub", "site-b");
  fs::copy_file(Allow() + "/a.pub", Allow() + "/a-copy.pub");
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(), HasSubstr(Allow() + "/a-copy.pub"));
  EXPECT_THAT(ids.status().message(), HasSubstr(Allow() + "/a.pub"));
  EXPECT_THAT(ids.status().message(), HasSubstr("same curve public key"));
}

TEST_F(AllowlistTest, SameKeyUnderAnotherNameIsStillADuplicate) {
  const PublicIdentity a = Enroll("a.pub", "site-a");
  PublicIdentity renamed = a;
  renamed.name = "site-z";
  WriteWithMode(Allow() + "/z.pub", FormatPublicIdentity(renamed), 0644);
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(), HasSubstr("same curve public key"));
}

TEST_F(AllowlistTest, DuplicateSiteNameIsAnError) {
  Enroll("a.pub", "site-a");
  GenerateTo("second", "site-a");  // another key pair under the same name
  fs::copy_file(Path("second.pub"), Allow() + "/a2.pub");
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(), HasSubstr("same site name"));
}

TEST_F(AllowlistTest, MissingDirectoryIsNotFoundAndAFileIsNotADirectory) {
  EXPECT_EQ(ReadAllowlist(Path("nope")).status().code(), StatusCode::kNotFound);
  const PublicIdentity a = Enroll("a.pub", "site-a");
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow() + "/a.pub");
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(), HasSubstr("is not a directory"));
}

// Issue 26 item 9: whoever can write the allowlist directory can enroll a site.
TEST_F(AllowlistTest, GroupOrWorldWritableDirectoryIsRefusedNamingIt) {
  Enroll("a.pub", "site-a");
  for (mode_t mode : {mode_t{0775}, mode_t{0757}, mode_t{01777}}) {
    ASSERT_EQ(::chmod(Allow().c_str(), mode), 0);
    Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
    EXPECT_EQ(ids.status().code(), StatusCode::kPermissionDenied) << std::oct << mode;
    EXPECT_THAT(ids.status().message(),
                HasSubstr("allowlist directory " + Allow() + " is writable by group or others"));
    EXPECT_THAT(ids.status().message(), HasSubstr("run: chmod go-w " + Allow()));
  }
  ASSERT_EQ(::chmod(Allow().c_str(), 0755), 0);  // the suggested fix works
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->size(), 1u);
}

TEST_F(AllowlistTest, WorldWritablePubIsRefusedNamingIt) {
  Enroll("a.pub", "site-a");
  Enroll("b.pub", "site-b");
  ASSERT_EQ(::chmod((Allow() + "/b.pub").c_str(), 0666), 0);
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  EXPECT_EQ(ids.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(ids.status().message(),
              HasSubstr(Allow() + "/b.pub is writable by group or others (mode 0666)"));
  EXPECT_THAT(ids.status().message(), HasSubstr("run: chmod go-w " + Allow() + "/b.pub"));
}

TEST_F(AllowlistTest, SymlinkedPubIsRefusedNamingIt) {
  Enroll("a.pub", "site-a");
  GenerateTo("b-keys", "site-b");
  // What an operator might do instead of copying; the target is a perfectly good .pub.
  ASSERT_EQ(::symlink(Path("b-keys.pub").c_str(), (Allow() + "/b.pub").c_str()), 0);
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  EXPECT_EQ(ids.status().code(), StatusCode::kPermissionDenied) << ids.status().ToString();
  EXPECT_THAT(ids.status().message(), HasSubstr(Allow() + "/b.pub is a symbolic link"));
}

TEST_F(AllowlistTest, PubOwnedByAnotherUserIsRefusedNamingIt) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to chown a file to uid 65534";
  Enroll("a.pub", "site-a");
  const std::string pub = Allow() + "/a.pub";
  ASSERT_EQ(::chown(pub.c_str(), kNobody, static_cast<gid_t>(-1)), 0);
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  EXPECT_EQ(ids.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(ids.status().message(), HasSubstr(pub + " is owned by uid 65534"));
  EXPECT_THAT(ids.status().message(), HasSubstr("run: chown 0 " + pub));
  EXPECT_EQ(ReadPublicIdentity(pub).status().code(), StatusCode::kPermissionDenied);
  ASSERT_EQ(::chown(pub.c_str(), 0, static_cast<gid_t>(-1)), 0);  // root-owned is fine
  EXPECT_TRUE(ReadAllowlist(Allow()).ok());
}

TEST_F(AllowlistTest, DirectoryOwnedByAnotherUserIsRefusedNamingIt) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to chown a directory to uid 65534";
  Enroll("a.pub", "site-a");
  ASSERT_EQ(::chown(Allow().c_str(), kNobody, static_cast<gid_t>(-1)), 0);
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(Allow());
  EXPECT_EQ(ids.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(ids.status().message(),
              HasSubstr("allowlist directory " + Allow() + " is owned by uid 65534"));
}

// The directory's own path may be a link (e.g. /etc/fedmesh/allow -> a versioned folder):
// the directory it reaches is the one checked and read.
TEST_F(AllowlistTest, LinkToTheDirectoryIsFollowedAndTheTargetChecked) {
  const PublicIdentity a = Enroll("a.pub", "site-a");
  const std::string link = Path("allow-link");
  ASSERT_EQ(::symlink(Allow().c_str(), link.c_str()), 0);
  Result<std::vector<PublicIdentity>> ids = ReadAllowlist(link);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_EQ(ids->size(), 1u);
  EXPECT_EQ((*ids)[0], a);
  ASSERT_EQ(::chmod(Allow().c_str(), 0775), 0);
  EXPECT_EQ(ReadAllowlist(link).status().code(), StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace fedmesh
