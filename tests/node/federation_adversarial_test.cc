// Issue 26 acceptance: four honest fedmesh-node processes and one enrolled malicious site
// (site-5, driven from this test over a real ZmqClient with its enrolled key) against a real
// fedmesh-aggregator on loopback. The malicious site (a) registers 100 examples and claims
// 10^9 in every update, (b) trickles a never-ending upload (a 200-chunk update, one chunk
// every 250 ms), (c) floods Register (200 at once), (d) stops reading in round 4, the last,
// where it also holds its task. Its key is then revoked with SIGHUP mid-round 4: the round
// closes without waiting for it (a round waits for every selected node until timeout_s, 300
// s here). The same federation without it runs first; the final accuracy must match within
// 1 point and the aggregator's peak RSS stay within 64 MiB of it.
#include <atomic>
#include <thread>

#include "crypto/update_signature.h"
#include "tests/node/federation_fixture.h"
#include "transport/zmq/zmq_client.h"

namespace fedmesh::federation_testing {
namespace {

constexpr char kFed[] = "fashion-mnist-demo";

// Peak resident set (VmHWM) of `pid` in bytes; 0 when it cannot be read (exited).
uint64_t PeakRss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

class MaliciousSite {
 public:
  MaliciousSite(Identity id, const std::string& endpoint, const PublicIdentity& aggregator)
      : identity_(std::move(id)) {
    ZmqClientOptions o;
    o.federation_id = kFed;
    o.node_id = identity_.name();
    o.send_timeout_ms = 200;
    auto c = ZmqClient::Create(o, &identity_);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    client_ = std::move(c).value();
    EXPECT_TRUE(client_->Connect(endpoint, aggregator.curve_public).ok());
    thread_ = std::thread([this] { Run(); });
  }
  ~MaliciousSite() {
    stop_ = true;
    thread_.join();
  }
  bool holding() const { return holding_; }
  int answered() const { return answered_; }

 private:
  void Send(wire::Body body, uint64_t round, uint64_t version) {
    (void)client_->Send(wire::Message{{kFed, identity_.name(), round, version, next_id_++}, std::move(body)});
  }

  void Run() {
    for (int i = 0; i < 200; ++i) Send(wire::Register{identity_.name(), 100, {}}, 0, 0);  // (c)
    std::vector<wire::Frame> trickle;
    size_t trickled = 0;
    auto next_chunk = Clock::now();
    while (!stop_) {
      if (!holding_) {
        auto m = client_->Poll(20);
        if (m.ok() && m->has_value()) {
          if (const auto* task = std::get_if<wire::FitTask>(&(*m)->body); task && !task->evaluate_only) {
            const uint64_t round = task->round, version = (*m)->header.model_version;
            if (round >= 4) {
              holding_ = true;  // (d): holds the task and never reads again
            } else {
              wire::FitResult r;  // (a): no change at all, claimed as 10^9 examples
              r.round = round;
              r.num_examples = 1000000000;
              r.train_loss = 0.1;
              r.update = wire::FloatPayload(std::vector<float>(task->global_model.element_count, 0.0f));
              r.bytes_before_codec = r.bytes_after_codec = r.update.bytes.size();
              EXPECT_TRUE(SignUpdate(identity_, kFed, version, &r).ok());
              if (trickle.empty()) {  // (b): the same update again in 4 KiB chunks, never finished
                wire::WireLimits small;
                small.max_chunk_bytes = 4096;
                auto frames = wire::Encode(
                    wire::Message{{kFed, identity_.name(), round, version, 1u << 30}, r}, small);
                EXPECT_TRUE(frames.ok());
                if (frames.ok()) trickle = std::move(*frames);
              }
              Send(std::move(r), round, version);
              ++answered_;
            }
          }
        }
      } else {
        std::this_thread::sleep_for(milliseconds(20));
      }
      if (!trickle.empty() && trickled + 1 < trickle.size() && Clock::now() >= next_chunk) {
        (void)client_->SendEncoded({trickle[trickled++]});  // never the last chunk
        next_chunk = Clock::now() + milliseconds(250);
      }
    }
  }

  Identity identity_;
  std::unique_ptr<ZmqClient> client_;
  std::atomic<bool> stop_{false}, holding_{false};
  std::atomic<int> answered_{0};
  uint64_t next_id_ = 1;
  std::thread thread_;
};

struct RunResult {
  double accuracy = -1;
  uint64_t peak_rss = 0;
  std::vector<std::string> lines;
};

TEST_F(FederationTest, FederationAdversarialSiteIsContainedAndRevokedMidRound) {
  // Every round selects every site: min_available_clients = all of them.
  const std::vector<std::string> common = {"rounds.total=4", "rounds.min_clients=4",
                                           "rounds.max_examples_per_node=20000",
                                           "rounds.timeout_s=300"};
  auto run = [&](const std::string& tag, int clients, const std::function<void(ChildProcess*, const std::string&)>& during) {
    RunResult out;
    std::vector<std::string> sets = common;
    sets.push_back("rounds.clients_per_round=" + std::to_string(clients));
    sets.push_back("rounds.min_available_clients=" + std::to_string(clients));
    sets.push_back("aggregator.db=run/" + tag + ".db");
    sets.push_back("aggregator.metrics=run/" + tag + ".jsonl");
    const std::string ep = StartAggregator(sets, "tcp://127.0.0.1:*", "aggregator-" + tag);
    if (ep.empty()) return out;
    ChildProcess* agg = aggregator_;
    during(agg, ep);
    for (int i = 1; i <= 4; ++i) {
      const std::string n = tag + "-site-" + std::to_string(i);
      EXPECT_NE(StartNode(i, ep, {"node.db=run/" + n + ".db", "node.metrics=run/" + n + ".jsonl"}, n),
                nullptr);
    }
    std::optional<int> rc;
    const auto deadline = Clock::now() + seconds(240);
    while (!(rc = agg->WaitExit(milliseconds(100))) && Clock::now() < deadline) {
      out.peak_rss = std::max(out.peak_rss, PeakRss(agg->pid()));
    }
    EXPECT_TRUE(rc.has_value() && *rc == 0) << tag << ": aggregator did not finish cleanly";
    out.lines = SplitLines(ReadWholeFile(dir_ / "run" / (tag + ".jsonl")));
    if (!out.lines.empty()) out.accuracy = JsonNumber(out.lines.back(), "test_accuracy").value_or(-1);
    return out;
  };

  const RunResult base = run("base", 4, [](ChildProcess*, const std::string&) {});
  ASSERT_EQ(base.lines.size(), 4u);

  ASSERT_TRUE(GenKey("site-5"));
  fs::copy_file(dir_ / "keys" / "site-5.pub", dir_ / "keys" / "allow" / "site-5.pub");
  auto identity = ReadIdentity((dir_ / "keys" / "site-5.key").string());
  ASSERT_TRUE(identity.ok()) << identity.status().ToString();
  auto agg_pub = ReadPublicIdentity((dir_ / "keys" / "aggregator.pub").string());
  ASSERT_TRUE(agg_pub.ok()) << agg_pub.status().ToString();
  std::unique_ptr<MaliciousSite> evil;
  std::thread revoker;
  std::atomic<bool> revoked{false};
  const RunResult attacked = run("attacked", 5, [&](ChildProcess* agg, const std::string& ep) {
    evil = std::make_unique<MaliciousSite>(std::move(*identity), ep, *agg_pub);
    // Mid-round 4: once the four honest updates are in and site-5 holds its task, its key is
    // removed and the aggregator sent SIGHUP.
    revoker = std::thread([&, agg] {
      const bool ready = WaitUntil(
          [&] {
            const std::string log = agg->Log();
            size_t n = 0;
            for (size_t at = log.find("round 4: accepted update from"); at != std::string::npos;
                 at = log.find("round 4: accepted update from", at + 1)) {
              ++n;
            }
            return evil->holding() && n >= 4;
          },
          seconds(200));
      if (!ready) return;
      fs::remove(dir_ / "keys" / "allow" / "site-5.pub");
      agg->Signal(SIGHUP);
      revoked = true;
    });
  });
  revoker.join();
  const int evil_answered = evil ? evil->answered() : -1;
  evil.reset();
  ChildProcess* agg = aggregator_;
  ASSERT_TRUE(revoked.load()) << "round 4 never reached the state to revoke in";
  ASSERT_EQ(attacked.lines.size(), 4u);
  const std::string log = agg->Log();
  EXPECT_NE(log.find("site site-5 revoked"), std::string::npos);
  EXPECT_NE(log.find("claimed 1000000000 examples; weighted as 100"), std::string::npos);
  EXPECT_NE(log.find("dropped Register from site-5: over its rate"), std::string::npos);
  // Round 4 closed with the four honest updates, long before its 300 s deadline.
  EXPECT_EQ(JsonNumber(attacked.lines[3], "received").value_or(-1), 4) << attacked.lines[3];
  EXPECT_LT(JsonNumber(attacked.lines[3], "wall_s").value_or(1e9), 120) << attacked.lines[3];
  // site-5's updates counted in rounds 1-3 (it answered) with the weight it registered.
  EXPECT_EQ(evil_answered, 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(JsonNumber(attacked.lines[r], "received").value_or(-1), 5) << attacked.lines[r];
  }
  EXPECT_NEAR(attacked.accuracy, base.accuracy, 0.01)
      << "base " << base.lines.back() << "\nattacked " << attacked.lines.back();
  EXPECT_GT(base.accuracy, 0.70);
  ASSERT_GT(base.peak_rss, 0u);
  ASSERT_GT(attacked.peak_rss, 0u);
  EXPECT_LT(attacked.peak_rss, base.peak_rss + (uint64_t{64} << 20))
      << "base " << base.peak_rss << " attacked " << attacked.peak_rss;
  std::cout << "[ info ] accuracy base " << base.accuracy << " attacked " << attacked.accuracy
            << "; aggregator peak RSS base " << (base.peak_rss >> 20) << " MiB, attacked "
            << (attacked.peak_rss >> 20) << " MiB; " << ElapsedS() << " s\n";
}

}  // namespace
}  // namespace fedmesh::federation_testing
