// Issue 23 item 1, with real processes: fedmesh-provision makes kits for an aggregator and
// three sites from one project file; each kit is started with the command its README
// gives, from its own folder; the federation trains. Mid-run `fedmesh-provision add-site`
// makes a fourth kit, the aggregator's SIGHUP admits it without a restart, and the later
// rounds aggregate four sites. The kits' systemd units pass `systemd-analyze verify`.
#include <csignal>
#include <regex>

#include "tests/node/federation_fixture.h"

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture's helpers

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// The README's start command, as argv with the binary from this build.
std::vector<std::string> ReadmeCommand(const fs::path& kit) {
  static const std::regex kCommand("```sh\\n([^\\n]+)\\n```");
  const std::string readme = ReadWholeFile(kit / "README.md");
  std::smatch m;
  if (!std::regex_search(readme, m, kCommand)) return {};
  std::istringstream in(m[1].str());
  std::vector<std::string> argv;
  for (std::string w; in >> w;) argv.push_back(w);
  argv[0] = kBin + argv[0];
  return argv;
}

class ProvisionFederationTest : public FederationTest {};

TEST_F(ProvisionFederationTest, KitsRunAFederationAndAddSiteIsAdmittedOnSighup) {
  const int port = FreePort();
  std::ofstream(dir_ / "project.toml") << "[federation]\nid = \"kits-demo\"\n\n"
      "[aggregator]\naddress = \"tcp://127.0.0.1:" << port << "\"\n\n"
      "[aggregator.config.rounds]\ntotal = 200\nclients_per_round = 4\nmin_clients = 3\n"
      "min_available_clients = 3\ntimeout_s = 120.0\n\n"
      "[aggregator.config.model]\nname = \"mlp\"\nseed = 1\n\n"
      "[aggregator.config.train]\nlr = 0.05\n\n"
      "[aggregator.config.eval]\ndataset = \"fashion-mnist\"\n\n"
      "[site_defaults.config.train]\nthreads = 1\n\n"
      "[site_defaults.config.data]\ndataset = \"fashion-mnist\"\nnum_partitions = 4\n\n"
      "[kits]\nbin_dir = \"" << kBin.substr(0, kBin.size() - 1) << "\"\n\n"
      "[[site]]\nname = \"site-1\"\norganisation = \"General\"\n[site.config.data]\nindex = 0\n\n"
      "[[site]]\nname = \"site-2\"\n[site.config.data]\nindex = 1\n\n"
      "[[site]]\nname = \"site-3\"\n[site.config.data]\nindex = 2\n";
  auto rc = fedmesh::testing::RunToCompletion({kBin + "fedmesh-provision", "project.toml", "--out", "kits"}, dir_,
                                              dir_ / "provision.log", seconds(60));
  ASSERT_TRUE(rc.has_value() && *rc == 0) << ReadWholeFile(dir_ / "provision.log");

  const fs::path kits = dir_ / "kits";
  for (const char* kit : {"aggregator", "site-1"}) {
    // What the README says: the secret key is the owner's alone.
    const fs::path key = kits / kit / (std::string(kit) + ".key");
    EXPECT_EQ(fs::status(key).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write) << key;
  }
  ChildProcess* agg = Spawn("kit-aggregator", ReadmeCommand(kits / "aggregator"), {}, kits / "aggregator");
  ASSERT_NE(agg, nullptr);
  ASSERT_TRUE(WaitForLog(agg, "listening on", seconds(60))) << agg->Log();
  for (int i = 1; i <= 3; ++i) {
    const std::string name = "site-" + std::to_string(i);
    ASSERT_NE(Spawn("kit-" + name, ReadmeCommand(kits / name), {}, kits / name), nullptr);
  }
  const fs::path metrics = kits / "aggregator" / "state" / "aggregator-metrics.jsonl";
  ASSERT_TRUE(WaitUntil([&] { return SplitLines(ReadWholeFile(metrics)).size() >= 2 || !agg->Running(); },
                        seconds(180)))
      << "two rounds did not close";
  ASSERT_TRUE(agg->Running()) << agg->Log();

  // A fourth site mid-run: its kit, its key in the allowlists, SIGHUP, and it is in.
  rc = fedmesh::testing::RunToCompletion({kBin + "fedmesh-provision", "add-site", "site-4", "--project",
                                          "project.toml", "--kits", "kits", "--organisation", "Late Clinic"},
                                         dir_, dir_ / "add-site.log", seconds(60));
  ASSERT_TRUE(rc.has_value() && *rc == 0) << ReadWholeFile(dir_ / "add-site.log");
  EXPECT_TRUE(fs::exists(kits / "aggregator" / "allow" / "site-4.pub"));
  const size_t rounds_before = SplitLines(ReadWholeFile(metrics)).size();
  agg->Signal(SIGHUP);
  ASSERT_TRUE(WaitForLog(agg, ": 4 enrolled sites", seconds(30))) << agg->Log();
  std::vector<std::string> site4 = ReadmeCommand(kits / "site-4");
  site4.insert(site4.end(), {"--set", "data.index=3"});
  ASSERT_NE(Spawn("kit-site-4", site4, {}, kits / "site-4"), nullptr);
  ASSERT_TRUE(WaitForLog(agg, "node site-4 registered", seconds(60))) << agg->Log();

  // Rounds go on (200 are configured); one with all four sites must come.
  auto received_four = [&] {
    const auto lines = SplitLines(ReadWholeFile(metrics));
    for (size_t i = rounds_before; i < lines.size(); ++i)
      if (JsonNumber(lines[i], "received").value_or(0) == 4) return true;
    return false;
  };
  EXPECT_TRUE(WaitUntil([&] { return received_four() || !agg->Running(); }, seconds(180)))
      << "no round after the SIGHUP aggregated the fourth site";
  EXPECT_TRUE(received_four());
  agg->Signal(SIGTERM);  // stops cleanly (exit 128 + 15); the store keeps the state
  const auto exit_rc = agg->WaitExit(seconds(60));
  ASSERT_TRUE(exit_rc.has_value()) << "aggregator still running";
  EXPECT_EQ(*exit_rc, 128 + SIGTERM);
  EXPECT_NE(agg->Log().find("stopping at round"), std::string::npos) << agg->Log();
  const auto lines = SplitLines(ReadWholeFile(metrics));
  for (size_t i = 0; i < rounds_before; ++i) EXPECT_EQ(JsonNumber(lines[i], "received").value_or(-1), 3) << lines[i];
  EXPECT_GT(JsonNumber(lines.back(), "test_accuracy").value_or(0), 0.7) << lines.back();
  EXPECT_NE(ReadWholeFile(dir_ / "project.toml").find("name = \"site-4\""), std::string::npos);

  // The units are valid systemd units (when this machine has systemd-analyze).
  if (std::system("command -v systemd-analyze >/dev/null 2>&1") == 0) {
    for (const char* unit : {"aggregator/fedmesh-aggregator.service", "site-1/fedmesh-site-1.service"}) {
      const std::string cmd = "systemd-analyze verify " + (kits / unit).string() + " >" +
                              (dir_ / "verify.log").string() + " 2>&1";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << unit << ":\n" << ReadWholeFile(dir_ / "verify.log");
    }
  }
}

// Bad input exits 2 naming the file, line and key; existing kits are not overwritten.
TEST_F(ProvisionFederationTest, BadProjectsAndExistingKitsExitTwo) {
  std::ofstream(dir_ / "bad.toml") << "[federation]\nid = \"f\"\n[aggregator]\naddress = \"agg:5555\"\n";
  auto rc = fedmesh::testing::RunToCompletion({kBin + "fedmesh-provision", "bad.toml", "--out", "kits"}, dir_,
                                              dir_ / "bad.log", seconds(30));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 2);
  EXPECT_NE(ReadWholeFile(dir_ / "bad.log").find("bad.toml:4: [aggregator] address"), std::string::npos)
      << ReadWholeFile(dir_ / "bad.log");
  EXPECT_FALSE(fs::exists(dir_ / "kits"));
  std::ofstream(dir_ / "ok.toml") << "[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n"
                                     "[[site]]\nname = \"s\"\n";
  rc = fedmesh::testing::RunToCompletion({kBin + "fedmesh-provision", "ok.toml", "--out", "kits"}, dir_,
                                         dir_ / "ok.log", seconds(30));
  ASSERT_TRUE(rc.has_value() && *rc == 0) << ReadWholeFile(dir_ / "ok.log");
  rc = fedmesh::testing::RunToCompletion({kBin + "fedmesh-provision", "ok.toml", "--out", "kits"}, dir_,
                                         dir_ / "again.log", seconds(30));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 2);
  EXPECT_NE(ReadWholeFile(dir_ / "again.log").find("never overwritten"), std::string::npos);
}

}  // namespace
}  // namespace fedmesh
