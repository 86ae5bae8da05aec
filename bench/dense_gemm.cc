// The mlp's first Dense layer (batch 32, 784 -> 256) on the CPU backend, one thread, against
// the plain OpenBLAS calls in the same run:
//  - forward: CpuBackend::Gemm (x W^T computed as (W x^T)^T, see there) vs cblas_sgemm on
//    x W^T directly;
//  - backward + plain SGD step: the fused weight-gradient GEMM (-lr * dy^T x added into W,
//    Dense::BackwardSgd) vs the gradient GEMM then SgdStep (Model::ForwardBackward + Sgd).
// Prints one JSON line with microseconds per call and the ratios.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/backend.h"
#include "core/json_line.h"
#include "core/rng.h"

namespace {

std::vector<float> Random(size_t n, uint64_t seed) {
  fedmesh::Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Uniform(-1.0, 1.0));
  return v;
}

// Microseconds per call: the best of `reps` timings of `iters` calls.
double MicrosPerCall(int reps, int iters, const std::function<void()>& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s / iters * 1e6);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int batch = 32, in = 784, out = 256, iters = 2000, reps = 5;
  CLI::App app{"Dense-layer GEMMs: fedmesh's CPU backend vs plain OpenBLAS calls"};
  app.add_option("--batch", batch);
  app.add_option("--in", in);
  app.add_option("--out", out);
  app.add_option("--iters", iters);
  app.add_option("--reps", reps);
  CLI11_PARSE(app, argc, argv);

  auto be = fedmesh::MakeCpuBackend(1);
  const auto x = Random(size_t(batch) * in, 1), dy = Random(size_t(batch) * out, 2);
  auto w = Random(size_t(out) * in, 3);
  std::vector<float> y(size_t(batch) * out), dw(w.size());
  const float lr = 1e-6f;  // keeps W bounded over the repetitions

  const double fwd_blas = MicrosPerCall(reps, iters, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, out, in, 1.0f, x.data(), in,
                w.data(), in, 0.0f, y.data(), out);
  });
  const double fwd = MicrosPerCall(reps, iters, [&] {
    be->Gemm(false, true, batch, out, in, 1.0f, x.data(), in, w.data(), in, 0.0f, y.data(), out);
  });
  const double step_split = MicrosPerCall(reps, iters, [&] {
    be->Gemm(true, false, out, in, batch, 1.0f, dy.data(), out, x.data(), in, 0.0f, dw.data(), in);
    be->SgdStep(w.data(), dw.data(), nullptr, nullptr, w.size(), fedmesh::SgdStepParams{.lr = lr});
  });
  const double step_fused = MicrosPerCall(reps, iters, [&] {
    be->Gemm(true, false, out, in, batch, -lr, dy.data(), out, x.data(), in, 1.0f, w.data(), in);
  });
  fedmesh::JsonLine j;
  j.Add("shape", std::to_string(batch) + "x" + std::to_string(in) + "->" + std::to_string(out));
  j.Add("forward_us", fwd);
  j.Add("forward_cblas_us", fwd_blas);
  j.Add("forward_speedup", fwd_blas / fwd);
  j.Add("weight_step_fused_us", step_fused);
  j.Add("weight_step_gemm_then_sgd_us", step_split);
  j.Add("weight_step_speedup", step_split / step_fused);
  std::printf("%s\n", j.str().c_str());
  return 0;
}
