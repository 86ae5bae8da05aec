// Encode and decode throughput of the codec chains (core/codec/codec.h) on one model-sized
// vector of Gaussian values, side by side with a single-threaded memcpy of the same bytes
// in the same run. Throughput is float32 input bytes (4 x n) per second, for encode and
// decode alike. Each rep times a memcpy, an Encode and a Decode back to back, so the
// baseline sees the same machine state as the codecs; the ratios use the best memcpy of
// the whole run (the highest bar). Output buffers are allocated once and reused, so only
// the codecs' own allocations are timed. Prints a Markdown table, then whether the issue's
// targets are met.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/codec/codec.h"
#include "core/rng.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void Die(const fedmesh::Status& s, const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

struct Timings {
  std::vector<double> secs;
  void Add(double s) { secs.push_back(s); }
  double Best() const { return *std::min_element(secs.begin(), secs.end()); }
  double Median() const { return fedmesh::bench::Median(secs); }
};

struct Row {
  std::string codec;
  size_t encoded_bytes = 0;
  double max_abs_err = 0.0;
  Timings enc, dec;
};

// Issue 4's targets: encode throughput as a fraction of memcpy, best of reps.
struct Target {
  const char* codec;
  double min_ratio;
};
constexpr Target kTargets[] = {{"fp16", 0.5}, {"bf16", 0.5}, {"int8", 0.5}, {"topk:0.01", 0.1}};

}  // namespace

int main(int argc, char** argv) {
  size_t n = 10'000'000;
  int reps = 10, warmup = 1;
  double sd = 0.01;
  std::vector<std::string> codecs = {"none",       "fp16",   "bf16",
                                     "int8",       "qsgd:8", "topk:0.01",
                                     "randk:0.01", "zstd",   "topk:0.01|int8|zstd",
                                     "fp16|zstd"};
  CLI::App app{"fedmesh codec encode/decode throughput vs memcpy"};
  app.add_option("--params", n, "Vector length in float32 values");
  app.add_option("--reps", reps, "Timed repetitions (best and median are reported)");
  app.add_option("--warmup", warmup, "Untimed repetitions first");
  app.add_option("--sd", sd, "Standard deviation of the Gaussian values");
  app.add_option("--codecs", codecs, "Codec chains to measure");
  CLI11_PARSE(app, argc, argv);
  if (n == 0 || reps < 1 || warmup < 0) {
    std::fprintf(stderr, "--params and --reps must be >= 1, --warmup >= 0\n");
    return 2;
  }

  std::vector<float> x(n);
  fedmesh::Rng rng(42);
  for (float& v : x) v = static_cast<float>(rng.Normal(0.0, sd));
  // Every destination is written once before timing: no page faults in the timed region.
  std::vector<float> copy(n, 1.0f), decoded(n, 1.0f);
  std::vector<uint8_t> encoded;
  const double bytes = 4.0 * static_cast<double>(n);

  Timings memcpy_t;
  std::vector<Row> rows;
  for (const std::string& text : codecs) {
    auto chain = fedmesh::codec::Chain::Parse(text);
    if (!chain.ok()) Die(chain.status(), "parse");
    encoded.reserve(chain->MaxEncodedBytes(n));
    Row row;
    row.codec = text;
    for (int r = -warmup; r < reps; ++r) {
      const uint64_t seed = 1000 + static_cast<uint64_t>(r + warmup);
      auto t0 = Clock::now();
      std::memcpy(copy.data(), x.data(), n * sizeof(float));
      const double tc = Since(t0);
      t0 = Clock::now();
      auto s = chain->Encode(x, seed, &encoded);
      const double te = Since(t0);
      if (!s.ok()) Die(s, text.c_str());
      t0 = Clock::now();
      s = chain->Decode(encoded, decoded);
      const double td = Since(t0);
      if (!s.ok()) Die(s, text.c_str());
      if (r < 0) continue;
      memcpy_t.Add(tc);
      row.enc.Add(te);
      row.dec.Add(td);
    }
    row.encoded_bytes = encoded.size();
    for (size_t i = 0; i < n; ++i) {
      row.max_abs_err = std::max(row.max_abs_err, std::fabs(double(decoded[i]) - x[i]));
    }
    rows.push_back(std::move(row));
  }

  const double mc_best = memcpy_t.Best(), mc_med = memcpy_t.Median();
  std::printf(
      "n = %zu float32 (%.1f MB), Gaussian sd %g; best / median of %d reps after %d "
      "warm-up; memcpy %.2f / %.2f GB/s (best / median over all %zu reps)\n\n",
      n, bytes / 1e6, sd, reps, warmup, bytes / mc_best / 1e9, bytes / mc_med / 1e9,
      memcpy_t.secs.size());
  std::printf(
      "| codec | encoded bytes | ratio | encode GB/s (best / median) | decode GB/s "
      "(best / median) | encode / memcpy | decode / memcpy | max abs error |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::printf("| memcpy | %zu | 1.00 | %.2f / %.2f | | 1.00 | | 0 |\n", size_t(bytes),
              bytes / mc_best / 1e9, bytes / mc_med / 1e9);
  for (const Row& r : rows) {
    std::string cell;  // '|' inside a Markdown table cell must be escaped
    for (char c : r.codec) cell += c == '|' ? std::string("\\|") : std::string(1, c);
    std::printf("| %s | %zu | %.1f | %.2f / %.2f | %.2f / %.2f | %.3f | %.3f | %.3g |\n",
                cell.c_str(), r.encoded_bytes, bytes / double(r.encoded_bytes),
                bytes / r.enc.Best() / 1e9, bytes / r.enc.Median() / 1e9,
                bytes / r.dec.Best() / 1e9, bytes / r.dec.Median() / 1e9, mc_best / r.enc.Best(),
                mc_best / r.dec.Best(), r.max_abs_err);
  }
  std::printf("\nTargets (encode, best of reps, against the best memcpy)%s:\n",
              n == 10'000'000 ? "" : "; the issue sets them for 10M parameters");
  bool all_met = true;
  for (const Target& t : kTargets) {
    auto it =
        std::find_if(rows.begin(), rows.end(), [&](const Row& r) { return r.codec == t.codec; });
    if (it == rows.end()) {
      std::printf("  %-10s encode >= %.1fx memcpy: not measured\n", t.codec, t.min_ratio);
      continue;
    }
    const double ratio = mc_best / it->enc.Best();
    const bool met = ratio >= t.min_ratio;
    all_met = all_met && met;
    std::printf("  %-10s encode >= %.1fx memcpy: %.3fx (median %.3fx) %s\n", t.codec, t.min_ratio,
                ratio, mc_med / it->enc.Median(), met ? "MET" : "MISSED");
  }
  std::printf("All targets %s\n", all_met ? "met" : "NOT met");
  return 0;
}
