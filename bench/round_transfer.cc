// One federated round's data path, measured: 10 nodes ship a FitResult of N float32
// parameters to the aggregator over ZeroMQ on loopback (CurveZMQ on vs plain TCP, same
// run), and the aggregator decodes them and computes the FedAvg average. Also the
// aggregation kernel alone (WeightedAverage over 10 updates) against a plain memcpy of
// the same bytes. Prints one JSON line per measurement. The baseline runs in the same
// process: raw cppzmq DEALER -> ROUTER moving the same bytes in the same 8 MiB frames
// (CurveZMQ on and off, no fedmesh framing, hashing or decoding), and each fedmesh line
// reports its ratio to it. Payload digests: BLAKE3 (fedmesh's default) and SHA-256 (what it
// used before), side by side with --digest both.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "aggregator/weighted_average.h"
#include "core/allocator_tuning.h"
#include "core/json_line.h"
#include "core/wire/wire_codec.h"
#include "crypto/identity.h"
#include "transport/zmq/zmq_client.h"
#include "transport/zmq/zmq_server.h"

namespace {

using fedmesh::Identity;
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void Die(const fedmesh::Status& s, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

// Best of `reps` for the aggregation kernel and for memcpy of the same bytes.
void BenchAggregation(size_t n, int clients, int reps) {
  std::vector<std::vector<float>> updates(clients, std::vector<float>(n));
  for (int c = 0; c < clients; ++c)
    for (size_t i = 0; i < n; ++i) updates[c][i] = float((i * 7 + c) % 1000) * 1e-3f;
  std::vector<std::span<const float>> spans(updates.begin(), updates.end());
  std::vector<double> weights(clients, 100.0);
  std::vector<float> out(n), sink(n);
  double best_avg = 1e30, best_copy = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Clock::now();
    auto s = fedmesh::WeightedAverage(spans, weights, out);
    if (!s.ok()) Die(s, "WeightedAverage");
    best_avg = std::min(best_avg, Since(t0));
    t0 = Clock::now();
    for (int c = 0; c < clients; ++c) std::memcpy(sink.data(), updates[c].data(), n * sizeof(float));
    best_copy = std::min(best_copy, Since(t0));
  }
  const double bytes = double(clients) * n * sizeof(float);
  fedmesh::JsonLine j;
  j.Add("bench", "aggregation").Add("params", int64_t(n)).Add("clients", clients)
      .Add("fedavg_gb_s", bytes / best_avg / 1e9).Add("memcpy_gb_s", bytes / best_copy / 1e9)
      .Add("ratio", best_copy / best_avg).Add("out0", double(out[0]) + sink[0] * 0.0);
  std::printf("%s\n", j.str().c_str());
}

// Raw ZeroMQ: `clients` DEALERs (one thread each) send n * 4 bytes in 8 MiB frames to one
// ROUTER, which receives every frame; `rounds` times over the same connections. Returns
// each round's MB/s, from the first send to the last frame.
std::vector<double> RawZmqMbPerS(size_t n, int clients, bool curve, int rounds) {
  constexpr size_t kFrame = size_t{8} << 20;
  const size_t bytes = n * sizeof(float);
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  char server_public[41], server_secret[41];
  if (curve) {
    zmq_curve_keypair(server_public, server_secret);
    router.set(zmq::sockopt::curve_server, 1);
    router.set(zmq::sockopt::curve_secretkey, std::string(server_secret));
  }
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  std::vector<zmq::socket_t> dealers;
  for (int c = 0; c < clients; ++c) {
    zmq::socket_t d(ctx, zmq::socket_type::dealer);
    d.set(zmq::sockopt::linger, 0);
    if (curve) {
      char pub[41], sec[41];
      zmq_curve_keypair(pub, sec);
      d.set(zmq::sockopt::curve_serverkey, std::string(server_public));
      d.set(zmq::sockopt::curve_publickey, std::string(pub));
      d.set(zmq::sockopt::curve_secretkey, std::string(sec));
    }
    d.connect(endpoint);
    d.send(zmq::str_buffer("hello"), zmq::send_flags::none);
    dealers.push_back(std::move(d));
  }
  for (int got = 0; got < clients; ++got) {  // every connection is up
    zmq::message_t id, body;
    (void)router.recv(id);
    (void)router.recv(body);
  }
  std::vector<uint8_t> payload(bytes, 7);
  const size_t frames = (bytes + kFrame - 1) / kFrame;
  std::vector<double> mb_s;
  for (int round = 0; round < rounds; ++round) {
    const auto t0 = Clock::now();
    std::vector<std::thread> senders;
    for (int c = 0; c < clients; ++c) {
      senders.emplace_back([&, c] {
        for (size_t f = 0; f < frames; ++f) {
          const size_t off = f * kFrame, len = std::min(kFrame, bytes - off);
          // Zero-copy, as fedmesh's sends are: the message points into the payload.
          zmq::message_t m(payload.data() + off, len, nullptr, nullptr);
          (void)dealers[c].send(m, zmq::send_flags::none);
        }
      });
    }
    for (size_t got = 0; got < frames * clients; ++got) {
      zmq::message_t id, body;
      (void)router.recv(id);
      (void)router.recv(body);
    }
    const double s = Since(t0);
    for (auto& t : senders) t.join();
    mb_s.push_back(double(clients) * bytes / s / 1e6);
  }
  return mb_s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v.size() % 2 == 1 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// `rounds` rounds over the same connections, as an aggregator runs them. A round's time
// (ship_s) runs from "every node starts sending" to "the aggregator has every update
// decoded" (ship_and_aggregate_s: and averaged). pre_encoded: the nodes' frames are made
// (wire::Encode: chunking, SHA-256) before the clock starts, so only the transport and the
// aggregator's side are timed, as in the raw baseline; otherwise each node encodes inside
// its Send, on the same two cores as the aggregator. Round 1 also pays for the fresh pages
// its receive buffers land in; later rounds reuse the memory the previous round freed,
// as the raw baseline's receive buffers do from its second frame on. data_parts (end to end
// only): each node sends its update as a real node does, SendResumable with the update
// moved in, its chunks' data as their own ZeroMQ parts straight from the payload (no copy
// into chunk frames, docs/wire.md "Chunk data parts"); without it, copied into chunk frames
// as before. One JSON line per round, then a summary of rounds 2..rounds (median) against
// the raw baseline's.
void BenchRound(size_t n, int clients, bool curve, bool pre_encoded, bool data_parts, int rounds,
                fedmesh::wire::DigestKind digest) {
  fedmesh::wire::WireLimits limits;
  limits.payload_digest = digest;
  const std::string digest_name(fedmesh::wire::DigestKindName(digest));
  auto server_id = Identity::Generate("aggregator");
  if (!server_id.ok()) Die(server_id.status(), "identity");
  std::vector<Identity> ids;
  std::vector<fedmesh::PublicIdentity> allow;
  for (int c = 0; c < clients; ++c) {
    auto id = Identity::Generate("site-" + std::to_string(c));
    if (!id.ok()) Die(id.status(), "identity");
    allow.push_back(id->public_identity());
    ids.push_back(std::move(*id));
  }
  fedmesh::ZmqServerOptions so;
  so.curve = curve;
  auto server = fedmesh::ZmqServer::Create(so, &*server_id, allow);
  if (!server.ok()) Die(server.status(), "server");
  auto endpoint = (*server)->Bind("tcp://127.0.0.1:*");
  if (!endpoint.ok()) Die(endpoint.status(), "bind");

  std::vector<std::unique_ptr<fedmesh::ZmqClient>> cl;
  std::vector<float> params(n);
  for (size_t i = 0; i < n; ++i) params[i] = float(i % 977) * 1e-3f;
  for (int c = 0; c < clients; ++c) {
    fedmesh::ZmqClientOptions co;
    co.curve = curve;
    co.federation_id = "bench";
    co.node_id = ids[c].name();
    co.limits = limits;
    auto client = fedmesh::ZmqClient::Create(co, &ids[c]);
    if (!client.ok()) Die(client.status(), "client");
    auto s = (*client)->Connect(*endpoint, server_id->public_identity().curve_public);
    if (!s.ok()) Die(s, "connect");
    fedmesh::wire::Message hello;
    hello.header = {"bench", ids[c].name(), 1, 0, 1};
    hello.body = fedmesh::wire::Register{ids[c].name(), 100, {}};
    s = (*client)->Send(hello);
    if (!s.ok()) Die(s, "register");
    cl.push_back(std::move(*client));
  }
  // Wait until every node's Register arrived: connections (and CURVE handshakes) are up.
  for (int got = 0; got < clients;) {
    auto e = (*server)->Poll(5000);
    if (!e.ok() || !e->has_value()) Die(e.ok() ? fedmesh::Status::DeadlineExceeded("register") : e.status(), "poll");
    if (std::holds_alternative<fedmesh::Received>(**e)) ++got;
  }

  const std::vector<double> raw = RawZmqMbPerS(n, clients, curve, rounds);
  std::vector<double> later, later_raw;
  for (int round = 1; round <= rounds; ++round) {
    std::vector<fedmesh::wire::Message> msgs;
    for (int c = 0; c < clients; ++c) {
      fedmesh::wire::FitResult fr;
      fr.round = round;
      fr.num_examples = 100;
      fr.train_loss = 0.1;
      fr.update = fedmesh::wire::FloatPayload(params);
      fr.bytes_before_codec = fr.bytes_after_codec = fr.update.bytes.size();
      fedmesh::wire::Message m;
      m.header = {"bench", ids[c].name(), uint64_t(round), 0, uint64_t(round) + 1};
      m.body = std::move(fr);
      msgs.push_back(std::move(m));
    }
    std::vector<std::vector<fedmesh::wire::Frame>> encoded(clients);
    if (pre_encoded) {
      for (int c = 0; c < clients; ++c) {
        auto f = fedmesh::wire::Encode(msgs[c], limits);
        if (!f.ok()) Die(f.status(), "encode");
        encoded[c] = std::move(*f);
      }
    }
    const auto t0 = Clock::now();
    std::vector<std::thread> senders;
    for (int c = 0; c < clients; ++c) {
      senders.emplace_back([&, c] {
        auto s = pre_encoded ? cl[c]->SendEncoded(std::move(encoded[c]))
                             : cl[c]->SendResumable(std::move(msgs[c]), data_parts);
        if (!s.ok()) Die(s, "send");
      });
    }
    std::vector<std::vector<float>> updates;
    while (static_cast<int>(updates.size()) < clients) {
      auto e = (*server)->Poll(30000);
      if (!e.ok() || !e->has_value()) Die(e.ok() ? fedmesh::Status::DeadlineExceeded("updates") : e.status(), "poll");
      if (auto* r = std::get_if<fedmesh::Received>(&**e)) {
        if (auto* fr = std::get_if<fedmesh::wire::FitResult>(&r->message.body)) {
          if (!fr->update.digest || fr->update.digest->kind != digest) {
            Die(fedmesh::Status::Internal("the update did not travel with the digest asked for"), "check");
          }
          auto v = fedmesh::wire::PayloadFloats(fr->update);
          if (!v.ok()) Die(v.status(), "payload");
          updates.push_back(std::move(*v));
        }
      }
    }
    const double ship_s = Since(t0);
    std::vector<std::span<const float>> spans(updates.begin(), updates.end());
    std::vector<float> out(n);
    auto s = fedmesh::WeightedAverage(spans, std::vector<double>(clients, 100.0), out);
    if (!s.ok()) Die(s, "average");
    const double total_s = Since(t0);
    for (auto& t : senders) t.join();
    if (out[1] != params[1]) Die(fedmesh::Status::Internal("the average is not the sent model"), "check");
    const double mb_s = double(clients) * n * 4 / ship_s / 1e6;
    const double raw_mb_s = raw[round - 1];
    if (round > 1) {
      later.push_back(mb_s);
      later_raw.push_back(raw_mb_s);
    }
    fedmesh::JsonLine j;
    j.Add("bench", "round").Add("params", int64_t(n)).Add("clients", clients).Add("curve", curve)
        .Add("pre_encoded", pre_encoded).Add("data_parts", data_parts).Add("digest", digest_name)
        .Add("round", round)
        .Add("ship_s", ship_s).Add("ship_and_aggregate_s", total_s)
        .Add("mb_per_s", mb_s).Add("raw_zmq_mb_per_s", raw_mb_s).Add("ratio_to_raw", mb_s / raw_mb_s);
    std::printf("%s\n", j.str().c_str());
    std::fflush(stdout);
  }
  if (!later.empty()) {
    fedmesh::JsonLine j;
    j.Add("bench", "rounds_after_first").Add("params", int64_t(n)).Add("clients", clients)
        .Add("curve", curve).Add("pre_encoded", pre_encoded).Add("data_parts", data_parts)
        .Add("digest", digest_name)
        .Add("rounds", int(later.size()))
        .Add("median_mb_per_s", Median(later)).Add("median_raw_zmq_mb_per_s", Median(later_raw))
        .Add("ratio_of_medians", Median(later) / Median(later_raw));
    std::printf("%s\n", j.str().c_str());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> sizes = {1000000, 10000000};
  int clients = 10, reps = 5;
  CLI::App app{"fedmesh round transfer + aggregation benchmark"};
  app.add_option("--params", sizes, "Model sizes in parameters");
  app.add_option("--clients", clients);
  app.add_option("--reps", reps, "Repetitions of the aggregation kernel (best is reported)");
  bool default_malloc = false;
  app.add_flag("--default-malloc", default_malloc,
               "Keep glibc's mmap threshold (what the binaries did before issue 26)");
  std::string curve = "both", encode = "both";
  app.add_option("--curve", curve, "Rounds with CurveZMQ: on, off or both")->check(CLI::IsMember({"on", "off", "both"}));
  app.add_option("--encode", encode, "Rounds whose nodes encode in their Send (e2e), before the clock (pre), or both")
      ->check(CLI::IsMember({"e2e", "pre", "both"}));
  int rounds = 4;
  app.add_option("--rounds", rounds, "Rounds per configuration over the same connections (the first pays for fresh pages)")
      ->check(CLI::Range(1, 100));
  std::string digest = "both";
  app.add_option("--digest", digest, "Payload digest: blake3 (the default on the wire), sha256 (before it) or both")
      ->check(CLI::IsMember({"blake3", "sha256", "both"}));
  std::string parts = "both";
  app.add_option("--data-parts", parts, "End-to-end rounds whose chunks' data travel as their own parts (on), copied into chunk frames (off), or both")
      ->check(CLI::IsMember({"on", "off", "both"}));
  bool rounds_only = false;
  app.add_flag("--rounds-only", rounds_only, "Skip the aggregation kernel measurement");
  CLI11_PARSE(app, argc, argv);
  if (!default_malloc) fedmesh::KeepLargeBuffersInHeap();
  if (!rounds_only)
    for (size_t n : sizes) BenchAggregation(n, clients, reps);
  for (size_t n : sizes) {
    for (bool pre : {false, true}) {
      if (encode != "both" && pre != (encode == "pre")) continue;
      for (auto kind : {fedmesh::wire::DigestKind::kSha256, fedmesh::wire::DigestKind::kBlake3}) {
        if (digest != "both" && digest != fedmesh::wire::DigestKindName(kind)) continue;
        for (bool dp : {false, true}) {
          if (pre ? dp : (parts != "both" && dp != (parts == "on"))) continue;
          if (curve != "on") BenchRound(n, clients, false, pre, dp, rounds, kind);
          if (curve != "off") BenchRound(n, clients, true, pre, dp, rounds, kind);
        }
      }
    }
  }
  return 0;
}
