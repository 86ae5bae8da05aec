// Payload digests, one core: BLAKE3 (each lane kernel this CPU runs) and SHA-256 (x86 SHA
// extensions and the portable loop) over the same bytes, against memcpy of them. One JSON
// line with GB/s and BLAKE3's ratio to the SHA-256 of the same process (the digest the wire
// used before BLAKE3). Kernels are chosen once per process (FEDMESH_BLAKE3_KERNEL,
// FEDMESH_SHA256_PORTABLE), so bench/digest_throughput.sh runs this once per setting.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/blake3.h"
#include "core/json_line.h"
#include "core/sha256.h"

namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
double BestSeconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 256;
  int reps = 5;
  CLI::App app{"fedmesh payload digest throughput (one core)"};
  app.add_option("--mib", mib, "Bytes hashed per repetition, MiB");
  app.add_option("--reps", reps, "Repetitions (best is reported)");
  CLI11_PARSE(app, argc, argv);
  std::vector<uint8_t> data(mib << 20), sink(data.size());
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  uint8_t check = 0;
  const double copy_s = BestSeconds(reps, [&] { std::memcpy(sink.data(), data.data(), data.size()); });
  const double blake3_s = BestSeconds(reps, [&] { check ^= fedmesh::Blake3::Hash(data)[0]; });
  const double sha256_s = BestSeconds(reps, [&] { check ^= fedmesh::Sha256::Hash(data)[0]; });
  const double gb = double(data.size()) / 1e9;
  fedmesh::JsonLine j;
  j.Add("bench", "digest").Add("bytes", int64_t(data.size()))
      .Add("blake3_kernel", fedmesh::Blake3::Kernel())
      .Add("sha256_kernel", fedmesh::Sha256::UsesShaExtensions() ? "sha-ni" : "portable")
      .Add("blake3_gb_s", gb / blake3_s).Add("sha256_gb_s", gb / sha256_s)
      .Add("memcpy_gb_s", gb / copy_s).Add("blake3_over_sha256", sha256_s / blake3_s)
      .Add("check", int(check ^ sink[1]));
  std::printf("%s\n", j.str().c_str());
  return 0;
}
