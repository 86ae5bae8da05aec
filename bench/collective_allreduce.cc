// All-reduce of float32 buffers (sum, in place) among N ranks on this machine, one thread per
// rank, for each size: fedmesh's Communicator over ZmqRingTransport (CurveZMQ, AES-256-GCM
// sealed links, or unencrypted), or
// gloo's ring all-reduce over its TCP transport (built when Debian's libgloo-dev is there).
// OpenMPI's MPI_Allreduce is bench/mpi_allreduce.cc, run by mpirun. bench/collective_allreduce.sh
// runs them side by side and prints the ratios (bench/RESULTS.md).
//   fedmesh_collective_allreduce --impl fedmesh|fedmesh-gcm|fedmesh-plain|gloo|gloo-chunked --ranks N
// One line per size: impl ranks bytes median_s algbw_GBps busbw_GBps. The process keeps large
// buffers in the heap as fedmesh-node does (core/allocator_tuning.h), whichever --impl runs;
// --default-malloc keeps glibc's mmap threshold instead.
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/bench_util.h"
#include "core/allocator_tuning.h"
#include "core/sha256.h"
#include "collective/communicator.h"
#include "collective/zmq_ring_transport.h"

#ifdef FEDMESH_BENCH_GLOO
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

// Repetitions for one size: enough for a stable median without minutes per point.
int RepsFor(uint64_t bytes) { return bytes <= (1u << 20) ? 50 : bytes <= (16u << 20) ? 10 : 4; }

// Runs body(rank) on `ranks` threads, each timing its repetitions; returns rank 0's times.
template <typename Body>
std::vector<double> OnRanks(int ranks, Body body) {
  std::vector<std::vector<double>> times(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { times[r] = body(r); });
  for (auto& t : threads) t.join();
  return times[0];
}

void Report(const std::string& impl, int ranks, uint64_t bytes, const std::vector<double>& t) {
  const double s = fedmesh::bench::Median(t);
  const double alg = bytes / s / 1e9;
  std::printf("%s %d %llu %.6f %.4f %.4f\n", impl.c_str(), ranks, static_cast<unsigned long long>(bytes), s, alg,
              alg * 2.0 * (ranks - 1) / ranks);
  std::fflush(stdout);
}

// The name a result line starts with.
std::string ImplName(fedmesh::collective::RingSecurity s) {
  using fedmesh::collective::RingSecurity;
  return s == RingSecurity::kCurve ? "fedmesh-curve" : s == RingSecurity::kNone ? "fedmesh-plain" : "fedmesh-gcm";
}

int RunFedmesh(int ranks, fedmesh::collective::RingSecurity security, const std::vector<uint64_t>& sizes,
               uint64_t chunk_bytes) {
  using namespace fedmesh;
  using namespace fedmesh::collective;
  std::vector<Identity> ids;
  std::vector<RingMember> members;
  for (int r = 0; r < ranks; ++r) {
    ids.push_back(std::move(Identity::Generate("rank-" + std::to_string(r))).value());
    members.push_back({"", ids.back().public_identity()});
  }
  ZmqRingTransportOptions to;
  to.security = security;
  std::vector<std::unique_ptr<ZmqRingTransport>> transports;
  std::vector<std::string> endpoints;
  for (int r = 0; r < ranks; ++r) {
    auto t = ZmqRingTransport::Create(ids[r], members, "tcp://127.0.0.1:*", to);
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
      return 1;
    }
    endpoints.push_back((*t)->endpoint());
    transports.push_back(std::move(t).value());
  }
  for (auto& t : transports) t->SetEndpoints(endpoints);
  const std::string impl = ImplName(security);
  for (uint64_t bytes : sizes) {
    const int reps = RepsFor(bytes);
    auto t = OnRanks(ranks, [&](int r) {
      CommunicatorOptions o;
      o.ring = {ranks, r, chunk_bytes, WireType::kFloat32, 0};
      auto c = std::move(Communicator::Create(o, transports[r].get())).value();
      std::vector<float> buf(bytes / 4, 1.0f);
      std::vector<double> times;
      (void)c->Barrier();
      (void)c->Allreduce(std::span<float>(buf), ReduceOp::kSum);  // warm-up: connections
      for (int i = 0; i < reps; ++i) {
        (void)c->Barrier();
        const auto start = Clock::now();
        Status s = c->Allreduce(std::span<float>(buf), ReduceOp::kSum);
        times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
        if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", r, s.ToString().c_str());
      }
      return times;
    });
    Report(impl, ranks, bytes, t);
  }
  return 0;
}

// One rank in this process (the others elsewhere, e.g. in other network namespaces:
// bench/netns/collective_ring.sh). Keys come from a fixed seed per rank, so every process
// knows every member's public key: a benchmark convenience, never for real use.
int RunOneRank(int rank, const std::vector<std::string>& group, fedmesh::collective::RingSecurity security,
               const std::vector<uint64_t>& sizes,
               uint64_t chunk_bytes) {
  using namespace fedmesh;
  using namespace fedmesh::collective;
  const int ranks = static_cast<int>(group.size());
  std::vector<Identity> ids;
  std::vector<RingMember> members;
  for (int r = 0; r < ranks; ++r) {
    const Sha256Digest curve_secret = Sha256::Hash("fedmesh-bench-curve-" + std::to_string(r));
    const Sha256Digest sign_seed = Sha256::Hash("fedmesh-bench-sign-" + std::to_string(r));
    ids.push_back(std::move(Identity::FromSecrets("rank-" + std::to_string(r), curve_secret, sign_seed)).value());
    members.push_back({"tcp://" + group[r], ids.back().public_identity()});
  }
  ZmqRingTransportOptions to;
  to.security = security;
  const std::string port = group[rank].substr(group[rank].rfind(':') + 1);
  auto t = ZmqRingTransport::Create(ids[rank], members, "tcp://0.0.0.0:" + port, to);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
    return 1;
  }
  CommunicatorOptions o;
  o.ring = {ranks, rank, chunk_bytes, WireType::kFloat32, 0};
  o.timeout_ms = 120000;
  auto c = std::move(Communicator::Create(o, t->get())).value();
  for (uint64_t bytes : sizes) {
    std::vector<float> buf(bytes / 4, 1.0f);
    std::vector<double> times;
    if (Status s = c->Barrier(); !s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
      return 1;
    }
    (void)c->Allreduce(std::span<float>(buf), ReduceOp::kSum);  // warm-up: connections
    for (int i = 0; i < 3; ++i) {
      (void)c->Barrier();
      const auto start = Clock::now();
      Status s = c->Allreduce(std::span<float>(buf), ReduceOp::kSum);
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
        return 1;
      }
    }
    if (buf[0] != std::pow(static_cast<float>(ranks), 4.0f)) {  // warm-up + 3 sums of 1.0s
      std::fprintf(stderr, "rank %d: wrong sum %g\n", rank, buf[0]);
      return 1;
    }
    if (rank == 0) Report(ImplName(security), ranks, bytes, times);
  }
  return 0;
}

#ifdef FEDMESH_BENCH_GLOO
int RunGloo(int ranks, bool chunked, const std::vector<uint64_t>& sizes) {
  const std::string dir = std::filesystem::temp_directory_path() / ("fedmesh-gloo-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string impl = chunked ? "gloo-ring-chunked" : "gloo-ring";
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> contexts(ranks);
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        gloo::transport::tcp::attr attr;
        attr.hostname = "127.0.0.1";
        auto dev = gloo::transport::tcp::CreateDevice(attr);
        gloo::rendezvous::FileStore store(dir);
        gloo::rendezvous::PrefixStore prefix("bench", store);
        auto ctx = std::make_shared<gloo::rendezvous::Context>(r, ranks);
        ctx->connectFullMesh(prefix, dev);
        contexts[r] = ctx;
      });
    }
    for (auto& t : threads) t.join();
  }
  for (uint64_t bytes : sizes) {
    const int reps = RepsFor(bytes);
    auto t = OnRanks(ranks, [&](int r) {
      std::vector<float> buf(bytes / 4, 1.0f);
      std::vector<float*> ptrs = {buf.data()};
      const int count = static_cast<int>(buf.size());
      std::vector<double> times;
      std::unique_ptr<gloo::Algorithm> algo;
      if (chunked) {
        algo = std::make_unique<gloo::AllreduceRingChunked<float>>(contexts[r], ptrs, count);
      } else {
        algo = std::make_unique<gloo::AllreduceRing<float>>(contexts[r], ptrs, count);
      }
      algo->run();  // warm-up
      for (int i = 0; i < reps; ++i) {
        const auto start = Clock::now();
        algo->run();
        times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      }
      return times;
    });
    Report(impl, ranks, bytes, t);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"All-reduce among ranks on this machine: fedmesh (CurveZMQ, AES-256-GCM, plain) or gloo"};
  std::string impl = "fedmesh";
  int ranks = 2;
  std::vector<uint64_t> sizes = {1024, 16384, 262144, 4194304, 67108864, 268435456};
  app.add_option("--impl", impl, "fedmesh (CurveZMQ) | fedmesh-gcm | fedmesh-plain | gloo | gloo-chunked");
  app.add_option("--ranks", ranks, "Ranks (threads)");
  app.add_option("--sizes", sizes, "Buffer sizes in bytes");
  uint64_t chunk_kb = 1024;
  int rank = -1;
  std::vector<std::string> group;
  app.add_option("--rank", rank, "Run only this rank here (the others run elsewhere); needs --group");
  app.add_option("--group", group, "HOST:PORT of every rank, in rank order (with --rank)")->delimiter(',');
  app.add_option("--chunk-kb", chunk_kb, "fedmesh: KiB per pipelined chunk ([collective] chunk_kb)");
  bool default_malloc = false;
  app.add_flag("--default-malloc", default_malloc,
               "Keep glibc's mmap threshold (fedmesh-node sets it as core/allocator_tuning.h says)");
  CLI11_PARSE(app, argc, argv);
  if (!default_malloc) fedmesh::KeepLargeBuffersInHeap();
  using fedmesh::collective::RingSecurity;
  const std::map<std::string, RingSecurity> fedmesh_impls = {
      {"fedmesh", RingSecurity::kCurve}, {"fedmesh-gcm", RingSecurity::kAes256Gcm}, {"fedmesh-plain", RingSecurity::kNone}};
  const auto fm = fedmesh_impls.find(impl);
  if (rank >= 0) {
    if (fm == fedmesh_impls.end()) {
      std::fprintf(stderr, "--rank runs fedmesh, fedmesh-gcm or fedmesh-plain only\n");
      return 2;
    }
    if (rank >= static_cast<int>(group.size())) {
      std::fprintf(stderr, "--rank %d is not in --group (%zu members)\n", rank, group.size());
      return 2;
    }
    return RunOneRank(rank, group, fm->second, sizes, chunk_kb * 1024);
  }
  if (fm != fedmesh_impls.end()) return RunFedmesh(ranks, fm->second, sizes, chunk_kb * 1024);
#ifdef FEDMESH_BENCH_GLOO
  if (impl == "gloo") return RunGloo(ranks, false, sizes);
  if (impl == "gloo-chunked") return RunGloo(ranks, true, sizes);
#endif
  std::fprintf(stderr, "unknown or unavailable --impl %s (gloo needs libgloo-dev at build time)\n", impl.c_str());
  return 2;
}
