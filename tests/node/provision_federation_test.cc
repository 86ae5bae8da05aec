// Issue 23 items 1, 2 and 4, with real processes: fedmesh-provision makes kits for an
// aggregator, three sites and two admins (one an observer) from one project file; each kit
// is started with the command its README gives, from its own folder; the federation
// trains. Mid-run `fedmesh-provision add-site` makes a fourth kit, the aggregator's SIGHUP
// admits it without a restart, and the later rounds aggregate four sites. Then
// fedmesh-admin: the observer cannot pause, an unknown key is refused, the admin pauses
// (no round opens), resumes (rounds go on) and aborts (the aggregator exits 0 and will not
// restart on that store). Headless Chromium loads the status page and saves a screenshot.
// The kits' systemd units pass `systemd-analyze verify`.
#include <csignal>
#include <regex>
#include <thread>

#include "tests/node/federation_fixture.h"

namespace fedmesh {
namespace {

using namespace federation_testing;  // NOLINT: the fixture's helpers

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

TEST_F(ProvisionFederationTest, KitsRunAFederationAdminsControlItAndTheStatusPageShowsIt) {
  const int port = FreeLoopbackPort();
  const int admin_port = FreeLoopbackPort();
  std::ofstream(dir_ / "project.toml") << "[federation]\nid = \"kits-demo\"\n\n"
      "[aggregator]\naddress = \"tcp://127.0.0.1:" << port << "\"\n"
      "admin_address = \"tcp://127.0.0.1:" << admin_port << "\"\n\n"
      "[aggregator.config.status_page]\nlisten = \"127.0.0.1:0\"\n\n"
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
      "[[site]]\nname = \"site-3\"\n[site.config.data]\nindex = 2\n\n"
      "[[admin]]\nname = \"alice\"\n\n[[admin]]\nname = \"bob\"\nrole = \"observer\"\n";
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

  // fedmesh-admin with the admin kits, as their READMEs say.
  auto admin = [&](const std::string& kit, std::vector<std::string> args, const std::string& log) {
    std::vector<std::string> argv = ReadmeCommand(kits / kit);
    EXPECT_EQ(argv.size(), 4u) << "fedmesh-admin --kit . status";
    argv.resize(3);
    argv.insert(argv.end(), args.begin(), args.end());
    auto code = fedmesh::testing::RunToCompletion(argv, kits / kit, dir_ / log, seconds(60));
    return code.value_or(-1);
  };
  EXPECT_EQ(admin("bob", {"pause"}, "bob-pause.log"), 1);
  EXPECT_NE(ReadWholeFile(dir_ / "bob-pause.log").find("the observer key bob may only read"), std::string::npos)
      << ReadWholeFile(dir_ / "bob-pause.log");
  rc = fedmesh::testing::RunToCompletion({kBin + "fedmesh-keys", "gen", "--out", (kits / "mallory").string()}, dir_,
                                         dir_ / "mallory-keys.log", seconds(30));
  ASSERT_TRUE(rc.has_value() && *rc == 0) << ReadWholeFile(dir_ / "mallory-keys.log");
  fs::create_directories(kits / "mallory-kit");
  fs::rename(kits / "mallory.key", kits / "mallory-kit" / "mallory.key");
  fs::copy_file(kits / "bob" / "aggregator.pub", kits / "mallory-kit" / "aggregator.pub");
  std::ofstream(kits / "mallory-kit" / "admin.toml")
      << "[admin]\nname = \"mallory\"\nkey = \"mallory.key\"\nendpoint = \"tcp://127.0.0.1:" << admin_port << "\"\n";
  rc = fedmesh::testing::RunToCompletion({kBin + "fedmesh-admin", "--kit", (kits / "mallory-kit").string(), "status"},
                                         dir_, dir_ / "mallory.log", seconds(30));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 1);
  EXPECT_NE(ReadWholeFile(dir_ / "mallory.log").find("refused admin key mallory"), std::string::npos)
      << ReadWholeFile(dir_ / "mallory.log");
  EXPECT_EQ(admin("bob", {"status"}, "bob-status.log"), 0);
  EXPECT_NE(ReadWholeFile(dir_ / "bob-status.log").find("federation kits-demo"), std::string::npos)
      << ReadWholeFile(dir_ / "bob-status.log");

  // The status page in headless Chromium: the chart and the site table, as a screenshot.
  static const std::regex kPage("status page on (http://127\\.0\\.0\\.1:[0-9]+/)");
  std::smatch page;
  const std::string agg_log = agg->Log();
  ASSERT_TRUE(std::regex_search(agg_log, page, kPage)) << agg_log;
  const std::string url = page[1].str();
  const fs::path shot = dir_ / "status-page.png";
  const std::string chromium = "chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
                               "--window-size=1100,1400 ";
  ASSERT_EQ(std::system((chromium + "--dump-dom " + url + " >" + (dir_ / "dom.html").string() + " 2>" +
                         (dir_ / "chromium.log").string()).c_str()), 0)
      << "headless Chromium (Debian chromium, scripts/setup.sh) failed: " << ReadWholeFile(dir_ / "chromium.log");
  const std::string dom = ReadWholeFile(dir_ / "dom.html");
  for (const char* want : {"Federation kits-demo", "id=\"round-chart\"", "<polyline class=\"accuracy\"",
                           "<td>site-4</td>", "<td>site-1</td>", "model-v"}) {
    EXPECT_NE(dom.find(want), std::string::npos) << want << " not in the page:\n" << dom;
  }
  ASSERT_EQ(std::system((chromium + "--screenshot=" + shot.string() + " " + url + " >>" +
                         (dir_ / "chromium.log").string() + " 2>&1").c_str()), 0)
      << ReadWholeFile(dir_ / "chromium.log");
  ASSERT_TRUE(fs::exists(shot));
  EXPECT_GT(fs::file_size(shot), 20000u) << "a blank page makes a small PNG";
  EXPECT_EQ(ReadWholeFile(shot).substr(1, 3), "PNG");
  std::error_code ec;  // kept for people to look at: build/test-artifacts/status-page.png
  fs::create_directories(fs::path(kBin) / ".." / "test-artifacts", ec);
  fs::copy_file(shot, fs::path(kBin) / ".." / "test-artifacts" / "status-page.png",
                fs::copy_options::overwrite_existing, ec);

  // Pause: the open round closes, then no round opens; resume: rounds go on.
  EXPECT_EQ(admin("alice", {"pause"}, "pause.log"), 0) << ReadWholeFile(dir_ / "pause.log");
  ASSERT_TRUE(WaitForLog(agg, "admin alice (admin): pause", seconds(30))) << agg->Log();
  // A round open at the pause runs to its close (the reply names it): its line is written
  // before the count below is taken, however slow the machine.
  const std::string pause_reply = ReadWholeFile(dir_ / "pause.log");
  if (const size_t at = pause_reply.find("paused: round "); at != std::string::npos) {
    const int open_round = std::stoi(pause_reply.substr(at + 14));
    ASSERT_TRUE(WaitUntil([&] {
      const auto lines = SplitLines(ReadWholeFile(metrics));
      return !lines.empty() && JsonNumber(lines.back(), "round").value_or(0) >= open_round;
    }, seconds(120))) << "round " << open_round << " did not close after the pause: " << pause_reply;
  } else {
    EXPECT_NE(pause_reply.find("paused: no round opens until resume"), std::string::npos) << pause_reply;
  }
  const size_t paused_at = SplitLines(ReadWholeFile(metrics)).size();
  std::this_thread::sleep_for(seconds(4));
  EXPECT_EQ(SplitLines(ReadWholeFile(metrics)).size(), paused_at) << "a round closed while paused";
  EXPECT_EQ(admin("alice", {"status"}, "paused-status.log"), 0);
  EXPECT_NE(ReadWholeFile(dir_ / "paused-status.log").find("paused, by alice"), std::string::npos)
      << ReadWholeFile(dir_ / "paused-status.log");
  EXPECT_EQ(admin("alice", {"resume"}, "resume.log"), 0) << ReadWholeFile(dir_ / "resume.log");
  EXPECT_TRUE(WaitUntil([&] { return SplitLines(ReadWholeFile(metrics)).size() > paused_at + 1; }, seconds(120)))
      << "no round after resume";

  // Abort: the aggregator stops with exit 0 and refuses to carry on from that store.
  EXPECT_EQ(admin("alice", {"abort", "demo done"}, "abort.log"), 0) << ReadWholeFile(dir_ / "abort.log");
  const auto exit_rc = agg->WaitExit(seconds(60));
  ASSERT_TRUE(exit_rc.has_value()) << "aggregator still running";
  EXPECT_EQ(*exit_rc, 0) << agg->Log();
  EXPECT_NE(agg->Log().find("federation stopped after"), std::string::npos) << agg->Log();
  EXPECT_NE(agg->Log().find("aborted: by alice: demo done"), std::string::npos) << agg->Log();
  std::vector<std::string> restart = ReadmeCommand(kits / "aggregator");
  rc = fedmesh::testing::RunToCompletion(restart, kits / "aggregator", dir_ / "restart.log", seconds(60));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 2);
  EXPECT_NE(ReadWholeFile(dir_ / "restart.log").find("was aborted by alice: demo done"), std::string::npos)
      << ReadWholeFile(dir_ / "restart.log");
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

// fedmesh-admin with a kit it cannot use exits 2, naming admin.toml, the line and the key.
TEST_F(ProvisionFederationTest, FedmeshAdminBadKitsExitTwoNamingTheKey) {
  fs::create_directories(dir_ / "kit");
  struct Case {
    std::string toml;
    std::string expect;
  };
  const Case cases[] = {
      {"[admin]\nname = \"a\"\nendpoint = \"tcp://127.0.0.1:1\"\ncolour = \"red\"\n", "admin.toml:4"},
      {"[admin]\nendpoint = \"tcp://127.0.0.1:1\"\n", "[admin] name"},
      {"[admin]\nname = \"a\"\nendpoint = \"tcp://127.0.0.1:1\"\ntimeout_ms = 0\n", "[admin] timeout_ms"},
      {"[admin]\nname = \"a\"\nendpoint = \"tcp://127.0.0.1:1\"\nkey = \"missing.key\"\n", "[admin] key"},
      {"[admin\nname = \"a\"\n", "admin.toml:1"},
  };
  for (const Case& c : cases) {
    std::ofstream(dir_ / "kit" / "admin.toml") << c.toml;
    auto rc = fedmesh::testing::RunToCompletion({kBin + "fedmesh-admin", "--kit", "kit", "status"}, dir_,
                                                dir_ / "admin.log", seconds(30));
    ASSERT_TRUE(rc.has_value());
    EXPECT_EQ(*rc, 2) << c.toml << ReadWholeFile(dir_ / "admin.log");
    EXPECT_NE(ReadWholeFile(dir_ / "admin.log").find(c.expect), std::string::npos)
        << c.toml << ReadWholeFile(dir_ / "admin.log");
  }
  auto rc = fedmesh::testing::RunToCompletion({kBin + "fedmesh-admin", "--kit", "kit", "reboot"}, dir_,
                                              dir_ / "admin.log", seconds(30));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 2) << "an unknown command is a usage error";
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
