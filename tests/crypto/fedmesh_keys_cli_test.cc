// fedmesh-keys as an operator runs it: the real binary, real files. Data on stdout, one
// error sentence on stderr, exit 0 / 2 (bad input) / 1 (anything else).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "crypto/key_files.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string Quote(const std::string& s) { return "'" + s + "'"; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class FedmeshKeysCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "fedmesh_keys_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  RunResult Run(const std::string& args) const {
    const std::string err_file = (dir_ / ".stderr").string();
    const std::string cmd =
        FEDMESH_BINARY_DIR "/bin/fedmesh-keys " + args + " 2>" + Quote(err_file);
    RunResult r;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
    const int status = ::pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.err = ReadAll(err_file);
    fs::remove(err_file);
    return r;
  }

  fs::path dir_;
};

TEST_F(FedmeshKeysCliTest, GenThenPubPrintsTheKeyInThePubFile) {
  const RunResult gen = Run("gen --out " + Quote(Path("site-a")));
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_EQ(gen.err, "");
  Result<PublicIdentity> pub = ReadPublicIdentity(Path("site-a.pub"));
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  const std::string z85 = pub->curve_public_z85();
  EXPECT_EQ(pub->name, "site-a");
  EXPECT_THAT(gen.out, HasSubstr(Path("site-a.key")));
  EXPECT_THAT(gen.out, HasSubstr(Path("site-a.pub")));
  EXPECT_THAT(gen.out, HasSubstr("curve public key: " + z85 + "\n"));
  EXPECT_EQ(ModeOf(Path("site-a.key")), 0600u);
  EXPECT_EQ(ModeOf(Path("site-a.pub")), 0644u);

  const RunResult from_key = Run("pub " + Quote(Path("site-a.key")));
  EXPECT_EQ(from_key.exit_code, 0) << from_key.err;
  EXPECT_EQ(from_key.out, z85 + "\n");
  const RunResult from_pub = Run("pub " + Quote(Path("site-a.pub")));
  EXPECT_EQ(from_pub.exit_code, 0) << from_pub.err;
  EXPECT_EQ(from_pub.out, z85 + "\n");
  // And the .key really holds that identity.
  Result<Identity> id = ReadIdentity(Path("site-a.key"));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->public_identity(), *pub);
}

TEST_F(FedmeshKeysCliTest, GenCreatesMissingDirectoriesOwnerOnly) {
  const RunResult gen = Run("gen --out " + Quote(Path("keys/site/site-b")));
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_TRUE(fs::exists(Path("keys/site/site-b.key")));
  EXPECT_TRUE(fs::exists(Path("keys/site/site-b.pub")));
  EXPECT_EQ(ModeOf(Path("keys")), 0700u);
  EXPECT_EQ(ModeOf(Path("keys/site")), 0700u);
}

TEST_F(FedmeshKeysCliTest, GenNameFlagAndShow) {
  const RunResult gen = Run("gen --out " + Quote(Path("k1")) + " --name hospital-a");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  Result<Identity> id = ReadIdentity(Path("k1.key"));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->name(), "hospital-a");

  const RunResult show = Run("show " + Quote(Path("k1.key")));
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const PublicIdentity& pub = id->public_identity();
  EXPECT_EQ(show.out, "name:         hospital-a\ncurve_public: " + pub.curve_public_z85() +
                          "\nsign_public:  " + pub.sign_public_z85() + "\n");
  EXPECT_THAT(show.out, Not(HasSubstr(id->curve_secret_z85())));
  EXPECT_EQ(Run("show " + Quote(Path("k1.pub"))).out, show.out);
}

TEST_F(FedmeshKeysCliTest, GenAcceptsAPrefixEndingInDotKey) {
  const RunResult gen = Run("gen --out " + Quote(Path("site-c.key")));
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_TRUE(fs::exists(Path("site-c.key")));
  EXPECT_TRUE(fs::exists(Path("site-c.pub")));
  EXPECT_FALSE(fs::exists(Path("site-c.key.key")));
}

TEST_F(FedmeshKeysCliTest, GenWithAnInvalidDefaultNameAsksForName) {
  const RunResult gen = Run("gen --out " + Quote(Path("my site")));
  EXPECT_EQ(gen.exit_code, 2);
  EXPECT_THAT(gen.err, HasSubstr("pass --name"));
  EXPECT_FALSE(fs::exists(Path("my site.key")));
  EXPECT_EQ(Run("gen --out " + Quote(Path("my site")) + " --name my-site").exit_code, 0);
}

TEST_F(FedmeshKeysCliTest, PubOnAWorldReadableKeyExits2WithTheChmodFix) {
  ASSERT_EQ(Run("gen --out " + Quote(Path("site-a"))).exit_code, 0);
  const std::string key = Path("site-a.key");
  ASSERT_EQ(::chmod(key.c_str(), 0644), 0);
  const RunResult r = Run("pub " + Quote(key));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, StartsWith("fedmesh-keys: error: "));
  EXPECT_THAT(r.err, HasSubstr("chmod 600 " + key));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  EXPECT_EQ(Run("show " + Quote(key)).exit_code, 2);
  // The .pub stays usable: it is meant to be world-readable.
  EXPECT_EQ(Run("pub " + Quote(Path("site-a.pub"))).exit_code, 0);
}

TEST_F(FedmeshKeysCliTest, GenTwiceToTheSamePrefixExits2AndKeepsTheFirstPair) {
  ASSERT_EQ(Run("gen --out " + Quote(Path("site-a"))).exit_code, 0);
  const std::string key_before = ReadAll(Path("site-a.key"));
  const std::string pub_before = ReadAll(Path("site-a.pub"));
  const RunResult again = Run("gen --out " + Quote(Path("site-a")));
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_THAT(again.err, HasSubstr(Path("site-a.key") + " already exists"));
  EXPECT_EQ(ReadAll(Path("site-a.key")), key_before);
  EXPECT_EQ(ReadAll(Path("site-a.pub")), pub_before);
}

TEST_F(FedmeshKeysCliTest, MissingFileExits2) {
  for (const char* cmd : {"pub ", "show "}) {
    const RunResult r = Run(cmd + Quote(Path("absent.key")));
    EXPECT_EQ(r.exit_code, 2) << cmd;
    EXPECT_EQ(r.out, "");
    EXPECT_THAT(r.err, HasSubstr(Path("absent.key") + " does not exist"));
  }
}

TEST_F(FedmeshKeysCliTest, CorruptFileExits2NamingIt) {
  ASSERT_EQ(Run("gen --out " + Quote(Path("site-a"))).exit_code, 0);
  std::string text = ReadAll(Path("site-a.pub"));
  const size_t at = text.find("curve_public = ");
  ASSERT_NE(at, std::string::npos);
  text[at + 15] = '~';  // not in the Z85 alphabet
  std::ofstream(Path("bad.pub")) << text;
  const RunResult r = Run("pub " + Quote(Path("bad.pub")));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(Path("bad.pub") + ":5: curve_public is not valid Z85"));
}

TEST_F(FedmeshKeysCliTest, BadUsageExits2AndHelpExits0) {
  EXPECT_EQ(Run("").exit_code, 2);            // no subcommand
  EXPECT_EQ(Run("gen").exit_code, 2);         // --out is required
  EXPECT_EQ(Run("pub").exit_code, 2);         // FILE is required
  EXPECT_EQ(Run("frobnicate").exit_code, 2);  // unknown subcommand
  EXPECT_EQ(Run("gen --out x --bogus").exit_code, 2);
  EXPECT_FALSE(fs::exists("x.key"));

  const RunResult help = Run("--help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("gen"));
  EXPECT_THAT(help.out, HasSubstr("pub"));
  const RunResult gen_help = Run("gen --help");
  EXPECT_EQ(gen_help.exit_code, 0);
  EXPECT_THAT(gen_help.out, HasSubstr("--out"));
}

TEST_F(FedmeshKeysCliTest, AllowlistListsEnrolledSitesAndRejectsDuplicates) {
  ASSERT_EQ(Run("gen --out " + Quote(Path("keys/site-a"))).exit_code, 0);
  ASSERT_EQ(Run("gen --out " + Quote(Path("keys/site-b"))).exit_code, 0);
  fs::create_directory(dir_ / "allow");
  fs::copy_file(Path("keys/site-a.pub"), Path("allow/site-a.pub"));
  fs::copy_file(Path("keys/site-b.pub"), Path("allow/site-b.pub"));
  const std::string a = ReadPublicIdentity(Path("keys/site-a.pub"))->curve_public_z85();
  const std::string b = ReadPublicIdentity(Path("keys/site-b.pub"))->curve_public_z85();

  const RunResult r = Run("allowlist " + Quote(Path("allow")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, a + " site-a\n" + b + " site-b\n");
  EXPECT_THAT(r.err, HasSubstr("2 site(s)"));

  fs::copy_file(Path("keys/site-a.pub"), Path("allow/site-a-again.pub"));
  const RunResult dup = Run("allowlist " + Quote(Path("allow")));
  EXPECT_EQ(dup.exit_code, 2);
  EXPECT_THAT(dup.err, HasSubstr("same curve public key"));
}

}  // namespace
}  // namespace fedmesh
