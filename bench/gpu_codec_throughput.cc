// Encode throughput of the GPU codecs (core/cuda/cuda_codecs.h) on one model-sized vector
// of Gaussian values that lives in GPU memory, side by side in the same run with
//   - a device-to-device cudaMemcpy of the same vector: the memory-bandwidth bar, counted
//     as bytes read plus bytes written (2 x 4n) per second, as the device tool's method asks;
//   - the CPU codec (Chain::Encode) on a host copy: what the node does today.
// Codec throughput is float32 input bytes (4 x n) per second, end to end: the call returns
// when the encoded bytes are in a host std::vector, so the device-to-host copy of what the
// codec keeps (k values + indices for top-k, n bytes of codes for int8) is included. Every
// chain's device bytes are compared with the CPU's once (a mismatch fails the run).
// "Device stages" times the same chain's kernels alone (top-k selection and compaction,
// int8 quantisation, the one wait), through the encoder's own workspace: what is left of
// the end-to-end time is the copy of the kept data to the host and the host's index
// section / zstd (Chain::EncodeParts).
// Timings are medians of --reps calls after --warmup calls. Prints a Markdown table.
//   build/bench/fedmesh_gpu_codec_throughput [--n 67108864] [--reps 10]
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/codec/codec.h"
#include "core/cuda/cuda_codec_kernels.h"
#include "core/cuda/cuda_codec_plan.h"
#include "core/cuda/cuda_codecs.h"
#include "core/cuda/device_info.h"
#include "core/rng.h"

namespace {

using fedmesh::bench::Median;

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gpu_codec_throughput: %s\n", what.c_str());
  std::exit(1);
}
void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPU codec encode throughput against a device memcpy and the CPU codec"};
  size_t n = size_t{1} << 26;
  int reps = 10, warmup = 2, cpu_reps = 2;
  std::vector<std::string> chains = {"topk:0.01", "topk:0.01|int8", "topk:0.01|int8|zstd",
                                     "int8", "int8|zstd"};
  app.add_option("--n", n, "float32 values in the vector (default 2^26 = 256 MiB)");
  app.add_option("--reps", reps, "timed calls per chain (median reported)");
  app.add_option("--warmup", warmup, "untimed calls first");
  app.add_option("--cpu-reps", cpu_reps, "timed CPU Chain::Encode calls per chain");
  app.add_option("--chains", chains, "codec chains to time");
  CLI11_PARSE(app, argc, argv);
  if (fedmesh::CudaDeviceCount() == 0) Die("no CUDA device: " + fedmesh::CudaUnavailableReason());
  std::printf("device: %s\n", fedmesh::CudaDeviceDescription(0).c_str());

  std::vector<float> host(n);
  fedmesh::Rng rng(42);
  for (auto& v : host) v = static_cast<float>(rng.Normal(0.0, 0.01));
  float *dev = nullptr, *copy = nullptr;
  Check(cudaMalloc(&dev, n * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&copy, n * sizeof(float)), "cudaMalloc");
  Check(cudaMemcpy(dev, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "upload");

  // The bar: device-to-device copies, timed with events.
  cudaEvent_t e0, e1;
  Check(cudaEventCreate(&e0), "event");
  Check(cudaEventCreate(&e1), "event");
  std::vector<double> copy_s;
  for (int r = 0; r < warmup + reps; ++r) {
    Check(cudaEventRecord(e0), "record");
    Check(cudaMemcpyAsync(copy, dev, n * sizeof(float), cudaMemcpyDeviceToDevice), "d2d");
    Check(cudaEventRecord(e1), "record");
    Check(cudaEventSynchronize(e1), "sync");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
    if (r >= warmup) copy_s.push_back(ms / 1e3);
  }
  const double in_bytes = 4.0 * static_cast<double>(n);
  const double bw = 2.0 * in_bytes / Median(copy_s);
  std::printf("n = %zu floats (%.0f MiB); device memcpy: %.0f GB/s (read + write)\n\n", n,
              in_bytes / (1 << 20), bw / 1e9);

  auto encoder = fedmesh::cuda::CudaCodecEncoder::Create();
  if (!encoder.ok()) Die("encoder: " + encoder.status().ToString());
  std::unique_ptr<fedmesh::cuda::CodecDeviceWorkspace> ws;
  if (auto s = fedmesh::cuda::CodecDeviceWorkspace::Create(nullptr, &ws); !s.ok()) {
    Die("workspace: " + s.ToString());
  }
  std::printf("| chain | bytes out | GPU encode ms | GPU GB/s (input) | / memcpy bw | device stages ms "
              "| stages GB/s | stages / memcpy bw | CPU encode ms | GPU / CPU | bytes equal CPU |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  std::vector<uint8_t> gpu_out, cpu_out;
  for (const auto& text : chains) {
    auto chain = fedmesh::codec::Chain::Parse(text);
    if (!chain.ok()) Die(text + ": " + chain.status().ToString());
    std::vector<double> gpu_s, cpu_s;
    for (int r = 0; r < warmup + reps; ++r) {
      const auto t0 = Clock::now();
      auto s = (*encoder)->Encode(*chain, dev, n, 7, &gpu_out);
      if (!s.ok()) Die(text + " on the GPU: " + s.ToString());
      if (r >= warmup) gpu_s.push_back(Since(t0));
    }
    auto plan = fedmesh::cuda::PlanCudaEncode(*chain);
    if (!plan.ok()) Die(text + ": " + plan.status().ToString());
    std::vector<double> stage_s;
    for (int r = 0; r < warmup + reps; ++r) {
      const auto t0 = Clock::now();
      fedmesh::Status s = ws->Begin();
      const float* values = dev;
      uint64_t m = n;
      if (s.ok() && plan->topk) {
        m = chain->sparsifier()->KeptCount(n);
        s = ws->EnqueueTopK(dev, n, m);
        values = ws->kept_values();
      }
      if (s.ok() && plan->int8_block != 0) s = ws->EnqueueInt8(values, m, plan->int8_block, !plan->topk);
      uint64_t first_non_finite = 0;
      bool select_ok = false;
      if (s.ok()) s = ws->Wait(&first_non_finite, &select_ok);
      if (!s.ok() || !select_ok) Die(text + " device stages: " + s.ToString());
      if (r >= warmup) stage_s.push_back(Since(t0));
    }
    for (int r = 0; r < cpu_reps; ++r) {
      const auto t0 = Clock::now();
      auto s = chain->Encode(host, 7, &cpu_out);
      if (!s.ok()) Die(text + " on the CPU: " + s.ToString());
      cpu_s.push_back(Since(t0));
    }
    const bool equal = gpu_out == cpu_out;
    const double g = Median(gpu_s), c = Median(cpu_s), d = Median(stage_s);
    std::printf("| %s | %zu | %.2f | %.1f | %.3f | %.3f | %.0f | %.3f | %.1f | %.1fx | %s |\n",
                text.c_str(), gpu_out.size(), g * 1e3, in_bytes / g / 1e9, in_bytes / g / bw,
                d * 1e3, in_bytes / d / 1e9, in_bytes / d / bw, c * 1e3, c / g,
                equal ? "yes" : "NO");
    if (!equal) Die(text + ": the GPU's bytes differ from the CPU's");
  }
  cudaFree(dev);
  cudaFree(copy);
  return 0;
}
