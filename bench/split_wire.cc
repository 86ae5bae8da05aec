// What one split-training message costs on the CPU before it reaches the network
// (vertical/split_messages.h, cut_wire.h, split_signature.h), per message of ROWS x COLS
// activations or gradients: the memcpy of its float32 values (the floor), encoding as
// float32 / fp16 / int8, decoding, and the Ed25519 signature (SHA-256 of the message, then
// sign) and its verification, each the median of --reps timed runs. Ratios are against the
// float32 encode and against the message's transfer time on a 1 Gbit/s link; the bytes are
// what goes on the wire (signature included).
//   build/bench/fedmesh_split_wire [--reps 200]
#include <chrono>
#include <cstdio>
#include <cstring>

#include <CLI/CLI.hpp>

#include "bench/bench_util.h"
#include "core/rng.h"
#include "crypto/identity.h"
#include "vertical/split_messages.h"
#include "vertical/split_signature.h"

namespace {

using namespace fedmesh;
using Clock = std::chrono::steady_clock;

template <typename F>
double MedianUs(int reps, F f) {
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return bench::Median(us);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedmesh split-training message costs"};
  int reps = 200;
  app.add_option("--reps", reps, "timed runs per figure (default 200)");
  CLI11_PARSE(app, argc, argv);
  Identity sender = std::move(Identity::Generate("label")).value();
  std::printf("%-11s %-8s %9s %10s %10s %10s %10s %10s\n", "message", "wire", "bytes", "memcpy us", "encode us",
              "decode us", "sign us", "verify us");
  for (auto [rows, cols] : {std::pair<uint32_t, uint32_t>{16, 64}, {256, 64}, {512, 64}, {2048, 64}}) {
    vertical::SplitMessage m;
    m.type = vertical::SplitMessageType::kGradients;
    m.training = true;
    m.rows = rows;
    m.cols = cols;
    m.values.resize(static_cast<size_t>(rows) * cols);
    Rng rng(1);
    for (float& v : m.values) v = static_cast<float>(rng.Normal() * 0.01);
    std::vector<float> copy(m.values.size());
    const double memcpy_us = MedianUs(reps, [&] { std::memcpy(copy.data(), m.values.data(), copy.size() * 4); });
    double f32_encode = 0;
    for (vertical::CutWire w : {vertical::CutWire::kFloat32, vertical::CutWire::kFloat16, vertical::CutWire::kInt8}) {
      m.wire = w;
      std::string bytes;
      const double enc = MedianUs(reps, [&] { bytes = vertical::EncodeSplitMessage(m).value(); });
      const double dec = MedianUs(reps, [&] { (void)vertical::DecodeSplitMessage(bytes).value(); });
      std::string signed_bytes;
      const double sign = MedianUs(reps, [&] { signed_bytes = vertical::SignSplitMessage(sender, "bench", "feature", bytes).value(); });
      const double verify = MedianUs(reps, [&] {
        if (!vertical::VerifySplitMessage(sender.public_identity(), "bench", "feature", signed_bytes).ok()) std::abort();
      });
      if (w == vertical::CutWire::kFloat32) f32_encode = enc;
      char what[32];
      std::snprintf(what, sizeof what, "%ux%u", rows, cols);
      const double link_us = static_cast<double>(signed_bytes.size()) * 8 / 1e3;  // at 1 Gbit/s
      std::printf("%-11s %-8s %9zu %10.1f %10.1f %10.1f %10.1f %10.1f   sign+verify: %.1fx the float32 encode, %.0f%% "
                  "of the message's %.0f us on a 1 Gbit/s link\n",
                  what, vertical::CutWireName(w), signed_bytes.size(), memcpy_us, enc, dec, sign, verify,
                  (sign + verify) / f32_encode, 100 * (sign + verify) / link_us, link_us);
    }
  }
  return 0;
}
