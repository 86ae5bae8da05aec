// AggregatorService's operations side (issue 23 items 2 and 4): the admin channel with its
// roles and its log, pause / resume / abort / kick through it, and the status page with its
// token, over real sockets on loopback.
#include <future>

#include <gmock/gmock.h>
#include <httplib.h>

#include "aggregator/stored_model_export.h"
#include "core/onnx/onnx_reader.h"
#include "tests/aggregator/aggregator_service_fixture.h"
#include "transport/zmq/admin_client.h"

namespace fedmesh {
namespace {

using namespace aggsvc_testing;  // NOLINT: the fixture's vocabulary
using ::testing::HasSubstr;

class AggregatorOperationsTest : public AggregatorServiceTest {
 protected:
  void SetUpAdmins() {
    fs::create_directories(dir_.path + "/admins");
    fs::create_directories(dir_.path + "/observers");
    ASSERT_TRUE(WriteIdentity(dir_.path + "/keys/alice", alice_).ok());
    ASSERT_TRUE(WriteIdentity(dir_.path + "/keys/bob", bob_).ok());
    fs::copy_file(PublicKeyPath(dir_.path + "/keys/alice"), dir_.path + "/admins/alice.pub");
    fs::copy_file(PublicKeyPath(dir_.path + "/keys/bob"), dir_.path + "/observers/bob.pub");
    config_.admin_listen = "tcp://127.0.0.1:*";
    config_.admin_dir = dir_.path + "/admins";
    config_.observer_dir = dir_.path + "/observers";
  }

  // One fedmesh-admin call, served by stepping the service (and pumping the nodes).
  Result<AdminReply> Admin(AggregatorService& s, const Identity& who, const std::string& command,
                           const std::string& argument = "") {
    auto call = std::async(std::launch::async, [&] {
      return AdminCall(who, agg_.public_identity(), s.admin_endpoint(), command, argument);
    });
    while (call.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready) {
      auto step = s.Step(5);
      EXPECT_TRUE(step.ok()) << step.status().ToString();
      for (FakeNode& n : nodes_) n.Pump();
    }
    return call.get();
  }

  Identity alice_ = NewIdentity("alice");
  Identity bob_ = NewIdentity("bob");
};

TEST_F(AggregatorOperationsTest, PauseResumeAbortByRoleEachLoggedWithWhoDidIt) {
  SetUpAdmins();
  config_.rounds.total_rounds = 50;
  auto service = StartService();
  ASSERT_NE(service, nullptr);
  ASSERT_FALSE(service->admin_endpoint().empty());

  // Paused before the sites come: they register, and no round opens.
  auto r = Admin(*service, alice_, "pause");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->reply["ok"], true) << r->reply.dump();
  ConnectNodes(service->endpoint(), 15);
  EXPECT_TRUE(PumpUntil(*service, [&] { return service->engine().connected_count() == 3u; }));
  const auto until = Clock::now() + std::chrono::milliseconds(500);  // and no round opens meanwhile
  PumpUntil(*service, [&] { return Clock::now() > until; });
  EXPECT_EQ(service->engine().connected_count(), 3u);
  EXPECT_EQ(service->engine().phase(), RoundEngine::Phase::kWaitingForNodes);
  EXPECT_EQ(service->engine().rounds_completed(), 0u);
  auto st = Admin(*service, bob_, "status");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->reply["result"]["state"], "paused");
  EXPECT_EQ(st->reply["result"]["message"], "by alice");

  // An observer may read but not change.
  auto refused = Admin(*service, bob_, "resume");
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->reply["ok"], false);
  EXPECT_THAT(refused->reply["error"].get<std::string>(), HasSubstr("observer key bob may only read"));
  EXPECT_EQ(service->engine().phase(), RoundEngine::Phase::kWaitingForNodes);
  auto unknown = Admin(*service, alice_, "reboot");
  ASSERT_TRUE(unknown.ok());
  EXPECT_THAT(unknown->reply["error"].get<std::string>(), HasSubstr("unknown command \"reboot\""));

  // Resume: rounds run; abort after two of them ends the federation there.
  ASSERT_EQ(Admin(*service, alice_, "resume")->reply["ok"], true);
  ASSERT_TRUE(PumpUntil(*service, [&] { return service->engine().rounds_completed() >= 2; }));
  auto sites = Admin(*service, bob_, "sites");
  ASSERT_TRUE(sites.ok());
  ASSERT_EQ(sites->reply["result"]["sites"].size(), 3u);
  for (const auto& site : sites->reply["result"]["sites"]) {
    EXPECT_EQ(site["connected"], true) << site.dump();
    EXPECT_GE(site["updates"].get<int>(), 2) << site.dump();
    EXPECT_GE(site["last_round"].get<int>(), 2) << site.dump();
  }
  // The exported model is the store's latest, as ONNX.
  auto exported = Admin(*service, bob_, "export");
  ASSERT_TRUE(exported.ok());
  ASSERT_EQ(exported->reply["ok"], true) << exported->reply.dump();
  auto direct = ExportStoredModel(service->store(), exported->reply["result"]["model_version"].get<uint64_t>());
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(exported->payload, direct->onnx);
  EXPECT_TRUE(onnx::ParseOnnx(exported->payload).ok());

  auto aborted = Admin(*service, alice_, "abort", "wrong data");
  ASSERT_TRUE(aborted.ok());
  EXPECT_EQ(aborted->reply["ok"], true) << aborted->reply.dump();
  EXPECT_TRUE(service->finished());
  EXPECT_TRUE(service->finish_status().ok());
  const uint64_t completed = service->engine().rounds_completed();
  EXPECT_LT(completed, 50u);
  auto log = service->store().AdminActions(100);
  ASSERT_TRUE(log.ok());
  std::vector<std::string> lines;
  for (const AdminActionRecord& a : *log) lines.push_back(a.admin + " " + a.role + " " + a.action + " " + a.result);
  EXPECT_THAT(lines, ::testing::ElementsAre(
                         "alice admin pause ok", "bob observer status ok",
                         ::testing::StartsWith("bob observer resume the observer key bob may only read"),
                         ::testing::StartsWith("alice admin reboot unknown command"), "alice admin resume ok",
                         "bob observer sites ok", "bob observer export ok", "alice admin abort ok"));
  service.reset();

  // A restart on the aborted store refuses to carry on.
  auto again = CreateService();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(), HasSubstr("was aborted by alice: wrong data"));
}

TEST_F(AggregatorOperationsTest, KickDropsASiteAndTheRoundGoesOnWithoutIt) {
  SetUpAdmins();
  config_.rounds.total_rounds = 3;
  config_.rounds.min_clients = 2;
  config_.rounds.min_available_clients = 2;
  auto service = StartService();
  ASSERT_NE(service, nullptr);
  ASSERT_EQ(Admin(*service, alice_, "pause")->reply["ok"], true);
  ConnectNodes(service->endpoint(), 15);
  ASSERT_TRUE(PumpUntil(*service, [&] { return service->engine().connected_count() == 3u; }));
  auto kicked = Admin(*service, alice_, "kick", "site-c");
  ASSERT_TRUE(kicked.ok());
  EXPECT_EQ(kicked->reply["ok"], true) << kicked->reply.dump();
  EXPECT_FALSE(service->engine().connected("site-c"));
  auto nobody = Admin(*service, alice_, "kick", "site-z");
  EXPECT_THAT(nobody->reply["error"].get<std::string>(), HasSubstr("no enrolled site is named site-z"));
  ASSERT_EQ(Admin(*service, alice_, "resume")->reply["ok"], true);
  ASSERT_TRUE(PumpUntil(*service, [&] { return service->finished(); }));
  auto rounds = service->store().Metrics();
  ASSERT_TRUE(rounds.ok());
  ASSERT_EQ(rounds->size(), 3u);
  for (const RoundMetrics& m : *rounds) EXPECT_EQ(m.received, 2u) << "round " << m.round;
  const FederationStatus st = service->BuildStatus();
  for (const SiteStatus& s : st.sites) EXPECT_EQ(s.enrolled, s.name != "site-c") << s.name;
}

TEST_F(AggregatorOperationsTest, BadArgumentsAreRefusedWithAReasonAndChangeNothing) {
  SetUpAdmins();
  auto service = StartService();
  ASSERT_NE(service, nullptr);
  struct Case {
    std::string command, argument, expect;
  };
  const Case cases[] = {
      {"export", "abc", "export takes a model version (a number), got \"abc\""},
      {"export", "99999999999999999999", "export takes a model version"},
      {"export", "7", "model version 7"},
      {"kick", "", "kick needs a site name"},
      {"resume", "", "not paused"},
  };
  for (const Case& c : cases) {
    auto r = Admin(*service, alice_, c.command, c.argument);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->reply["ok"], false) << c.command << " " << c.argument;
    EXPECT_THAT(r->reply.value("error", ""), HasSubstr(c.expect)) << r->reply.dump();
    EXPECT_TRUE(r->payload.empty());
  }
  EXPECT_FALSE(service->engine().paused());
  EXPECT_FALSE(service->finished());
}

TEST_F(AggregatorOperationsTest, AnAdminKeyThatIsAlsoASiteKeyIsRefused) {
  SetUpAdmins();
  fs::copy_file(dir_.path + "/allow/site-a.pub", dir_.path + "/admins/site-a.pub");
  auto s = CreateService();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("[admin] admins key site-a is also the key of site site-a"));
  EXPECT_THAT(s.status().message(), HasSubstr("must be kept apart from site keys"));
}

// An observer key may not be a site key either (the admin socket admits observers too).
TEST_F(AggregatorOperationsTest, AnObserverKeyThatIsAlsoASiteKeyIsRefused) {
  SetUpAdmins();
  fs::copy_file(dir_.path + "/allow/site-b.pub", dir_.path + "/observers/site-b.pub");
  auto s = CreateService();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("[admin] observers key site-b is also the key of site site-b"));
}

// Nor can a reload make one a site: the reload is refused and the sites stay as they were.
TEST_F(AggregatorOperationsTest, AReloadThatEnrolsAnAdminKeyAsASiteIsRefused) {
  SetUpAdmins();
  auto service = CreateService();
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  fs::copy_file(dir_.path + "/admins/alice.pub", dir_.path + "/allow/alice.pub");
  fs::permissions(dir_.path + "/allow/alice.pub", fs::perms::owner_read | fs::perms::owner_write |
                                                      fs::perms::group_read | fs::perms::others_read);
  const Status reload = (*service)->ReloadAllowlist();
  EXPECT_EQ(reload.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(reload.message(), HasSubstr("[admin] admins key alice is also the key of site alice"));
  EXPECT_FALSE((*service)->SiteOfKey(alice_.public_identity().curve_public_z85()).has_value());
  EXPECT_TRUE((*service)->SiteOfKey(nodes_.front().identity.public_identity().curve_public_z85()).has_value());
}

TEST_F(AggregatorOperationsTest, StatusPageShowsRoundsAndSitesAndRefusesWithoutItsToken) {
  const std::string token = "s3cret-token-for-the-page";
  std::ofstream(dir_.path + "/token") << token << "\n";
  config_.status_listen = "0.0.0.0:0";  // not loopback: the token is required
  config_.status_token_file = dir_.path + "/token";
  auto service = StartService();
  ASSERT_NE(service, nullptr);
  ASSERT_NE(service->status_page(), nullptr);
  ConnectNodes(service->endpoint(), 15);
  ASSERT_TRUE(PumpUntil(*service, [&] { return service->finished(); }));

  httplib::Client http("127.0.0.1", service->status_page()->port());
  for (const char* path : {"/", "/api/status", "/model/latest.onnx", "/?token=wrong"}) {
    auto res = http.Get(path);
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, 401) << path;
    EXPECT_THAT(res->body, HasSubstr("a token is required")) << path;
    EXPECT_EQ(res->body.find(token), std::string::npos);
  }
  auto page = http.Get("/?token=" + token);
  ASSERT_TRUE(page);
  ASSERT_EQ(page->status, 200);
  EXPECT_THAT(page->body, HasSubstr("Federation fed-test"));
  EXPECT_THAT(page->body, HasSubstr(">finished<"));
  EXPECT_THAT(page->body, HasSubstr("id=\"round-chart\""));
  EXPECT_THAT(page->body, HasSubstr("<polyline class=\"accuracy\""));
  for (const char* site : {"<td>site-a</td>", "<td>site-b</td>", "<td>site-c</td>"}) {
    EXPECT_THAT(page->body, HasSubstr(site));
  }
  EXPECT_THAT(page->body, HasSubstr("href=\"/model/2.onnx?token=" + token + "\""));
  EXPECT_EQ(page->body.find("http://"), page->body.find("http://www.w3.org/2000/svg"))
      << "nothing is fetched from elsewhere";
  EXPECT_EQ(page->get_header_value("Content-Security-Policy"), "default-src 'none'; style-src 'unsafe-inline'");

  auto api = http.Get("/api/status", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(api);
  ASSERT_EQ(api->status, 200);
  auto j = nlohmann::json::parse(api->body);
  EXPECT_EQ(j["state"], "finished");
  ASSERT_EQ(j["rounds"].size(), 2u);
  auto stored = service->store().Metrics();
  ASSERT_TRUE(stored.ok());
  EXPECT_DOUBLE_EQ(j["rounds"][1]["test_accuracy"].get<double>(), (*stored)[1].test_accuracy);
  for (const auto& site : j["sites"]) EXPECT_EQ(site["updates"], 2) << site.dump();

  auto model = http.Get("/model/latest.onnx?token=" + token);
  ASSERT_TRUE(model);
  ASSERT_EQ(model->status, 200);
  auto direct = ExportStoredModel(service->store(), 2);
  ASSERT_TRUE(direct.ok());
  EXPECT_EQ(model->body, direct->onnx);
  auto missing = http.Get("/model/99.onnx?token=" + token);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto other = http.Get("/etc/passwd?token=" + token);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
}

TEST_F(AggregatorOperationsTest, AShortTokenFileIsRefused) {
  std::ofstream(dir_.path + "/token") << "short\n";
  config_.status_listen = "127.0.0.1:0";
  config_.status_token_file = dir_.path + "/token";
  auto s = CreateService();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("at least 16 characters"));
}

}  // namespace
}  // namespace fedmesh
