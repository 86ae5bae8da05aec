// ECDH private set intersection at scale (issue 22): two parties with --ids ids each and
// --overlap of them shared run the whole protocol over CurveZMQ on loopback (one thread per
// party, blinding on all OpenMP threads). Reported beside its floor measured in the same
// run on the same cores: 2 scalar multiplications per id for both parties' ids (blind your
// own, double-blind the peer's), plus hashing every id to the group.
//   bench/psi.sh   (or build/bench/fedmesh_psi_bench --ids 1000000 --overlap 0.5)
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <CLI/CLI.hpp>

#include "collective/zmq_ring_transport.h"
#include "crypto/psi/ecdh_psi.h"
#include "crypto/psi/ristretto_points.h"
#include "vertical/psi_exchange.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedmesh ECDH-PSI benchmark: two parties over CurveZMQ on loopback"};
  uint64_t n = 1'000'000;
  double overlap = 0.5;
  app.add_option("--ids", n, "Ids per party (default 1000000)");
  app.add_option("--overlap", overlap, "Fraction of each party's ids the other holds too (default 0.5)");
  CLI11_PARSE(app, argc, argv);
  using namespace fedmesh;
  const uint64_t shared = static_cast<uint64_t>(overlap * static_cast<double>(n));
  std::vector<std::string> a, b;
  a.reserve(n);
  b.reserve(n);
  for (uint64_t i = 0; i < n; ++i) a.push_back("cust-" + std::to_string(i));
  for (uint64_t i = n - shared; i < 2 * n - shared; ++i) b.push_back("cust-" + std::to_string(i));
  std::printf("psi: %llu ids per party, %llu shared, %d OpenMP threads\n", static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(shared), omp_get_max_threads());

  // The floor: hashing 2n ids, then 4n scalar multiplications (2 per id of either party).
  auto t0 = std::chrono::steady_clock::now();
  std::vector<psi::Point> pa = psi::HashIds(a), pb = psi::HashIds(b);
  const double hash_s = Seconds(t0);
  auto scalar = psi::RandomScalar();
  t0 = std::chrono::steady_clock::now();
  for (int round = 0; round < 2; ++round) {
    if (!psi::Blind(scalar->span(), pa).ok() || !psi::Blind(scalar->span(), pb).ok()) return 1;
  }
  const double mult_s = Seconds(t0);
  pa = {};
  pb = {};
  std::printf("floor: hash 2n ids %.2f s, 2 scalar mults per id of both parties (4n) %.2f s = %.1f us each\n", hash_s,
              mult_s, mult_s / (4.0 * static_cast<double>(n)) * 1e6 * omp_get_max_threads());

  std::vector<Identity> ids;
  ids.push_back(std::move(Identity::Generate("party-a")).value());
  ids.push_back(std::move(Identity::Generate("party-b")).value());
  std::vector<collective::RingMember> members = {{"", ids[0].public_identity()}, {"", ids[1].public_identity()}};
  collective::ZmqRingTransportOptions to;
  to.linger_ms = 5000;
  auto ta = collective::ZmqRingTransport::Create(ids[0], members, "tcp://127.0.0.1:*", to);
  auto tb = collective::ZmqRingTransport::Create(ids[1], members, "tcp://127.0.0.1:*", to);
  if (!ta.ok() || !tb.ok()) return 1;
  const std::vector<std::string> endpoints = {(*ta)->endpoint(), (*tb)->endpoint()};
  (*ta)->SetEndpoints(endpoints);
  (*tb)->SetEndpoints(endpoints);
  t0 = std::chrono::steady_clock::now();
  auto party_a = psi::PsiParty::Create(a);
  auto party_b = psi::PsiParty::Create(b);
  if (!party_a.ok() || !party_b.ok()) return 1;
  vertical::PsiExchangeStats sa, sb;
  Result<psi::PsiResult> rb = Status::Internal("");
  std::thread tb_thread([&] { rb = vertical::RunPsi(**tb, 0, **party_b, {}, &sb); });
  auto ra = vertical::RunPsi(**ta, 1, **party_a, {}, &sa);
  tb_thread.join();
  const double psi_s = Seconds(t0);
  if (!ra.ok() || !rb.ok()) {
    std::fprintf(stderr, "psi failed: %s %s\n", ra.status().ToString().c_str(), rb.status().ToString().c_str());
    return 1;
  }
  if (ra->rows.size() != shared || rb->rows.size() != shared || ra->digest != rb->digest) {
    std::fprintf(stderr, "wrong intersection: %zu / %zu, want %llu\n", ra->rows.size(), rb->rows.size(),
                 static_cast<unsigned long long>(shared));
    return 1;
  }
  std::printf(
      "psi: %.2f s for both parties (intersection %zu, agreed), %.2fx the floor (%.2f s); bytes sent %llu by A, %llu "
      "by B (%.1f bytes per id each; 64 is the minimum)\n",
      psi_s, ra->rows.size(), psi_s / (hash_s + mult_s), hash_s + mult_s,
      static_cast<unsigned long long>(sa.bytes_sent), static_cast<unsigned long long>(sb.bytes_sent),
      static_cast<double>(sa.bytes_sent) / static_cast<double>(n));
  return 0;
}
