// DP-SGD step time against the non-private step, same model, batch and threads, in one
// run (issue 27): fedmesh's mlp (784-256-10) or cnn on real Fashion-MNIST, batches already in
// memory, fixed-size batches on both sides (the trainer's Poisson batches vary around the
// same mean). Non-private: ForwardBackward + SGD step. DP-SGD: ForwardBackwardClipped
// (per-example norms from the Dense layers' activations and output gradients, one
// reweighted GEMM per layer), Gaussian noise from the CSPRNG-keyed stream the node uses
// (crypto/dp/gaussian_noise.h), division by the batch, SGD step. REPEATS alternating runs;
// prints one JSON line per run and variant. bench/dp_sgd_opacus.py is the PyTorch side.
//   build/bench/fedmesh_dp_sgd_step --batch 256 --threads 2
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

#include "core/data/fashion_mnist.h"
#include "core/json_line.h"
#include "core/model_zoo.h"
#include "core/sgd.h"
#include "crypto/dp/gaussian_noise.h"

int main(int argc, char** argv) {
  std::string model_name = "mlp";
  int batch = 256, threads = 2, steps = 200, warmup = 20, repeats = 3;
  double clip = 1.0, noise_multiplier = 1.0;
  CLI::App app{"fedmesh DP-SGD step time vs the non-private step"};
  app.add_option("--model", model_name, "logreg, mlp or cnn");
  app.add_option("--batch", batch);
  app.add_option("--threads", threads);
  app.add_option("--steps", steps);
  app.add_option("--warmup", warmup);
  app.add_option("--repeats", repeats);
  CLI11_PARSE(app, argc, argv);

  auto data = fedmesh::LoadFashionMnist(fedmesh::DataSplit::kTrain);
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
    return 2;
  }
  auto backend = fedmesh::MakeCpuBackend(threads);
  fedmesh::ModelSpec spec;
  spec.name = model_name;
  // The layer code on both sides: DP-SGD's clipping runs on the layers of a built-in model
  // whatever its engine, so the non-private step must too for the ratio to mean overhead.
  auto model = fedmesh::BuildModel(spec, backend.get(), {fedmesh::BuiltinEngine::kLayers});
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 2;
  }
  auto& m = **model;
  m.InitParams(0);
  m.Reserve(batch);
  fedmesh::Sgd sgd(&m, {0.1f, 0.0f, 0.0f, 0.0f});
  auto noise = fedmesh::GaussianNoise::Create();
  if (!noise.ok()) return 1;
  const size_t n = data->size();
  const size_t dim = m.num_trainable();
  std::vector<float> sum(dim);
  auto plain = [&](int i) {
    m.LoadContiguousBatch(*data, (size_t(i) * batch) % (n - batch), batch);
    m.ForwardBackward(batch, i);
    sgd.Step();
  };
  auto dp = [&](int i) {
    m.LoadContiguousBatch(*data, (size_t(i) * batch) % (n - batch), batch);
    auto r = m.ForwardBackwardClipped(batch, i, clip, nullptr);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      std::exit(2);
    }
    float* g = m.grads();
    std::copy(g, g + dim, sum.begin());
    noise->Add(sum, noise_multiplier * clip);
    for (size_t k = 0; k < dim; ++k) g[k] = sum[k] / batch;
    sgd.Step();
  };
  auto time = [&](auto&& step) {
    for (int i = 0; i < warmup; ++i) step(i);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step(warmup + i);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  };
  for (int r = 0; r < repeats; ++r) {
    for (const char* variant : {"non-private", "dp-sgd"}) {
      const double s = std::string(variant) == "dp-sgd" ? time(dp) : time(plain);
      fedmesh::JsonLine j;
      j.Add("impl", "fedmesh").Add("variant", variant).Add("model", model_name).Add("batch", batch)
          .Add("threads", threads).Add("repeat", r).Add("step_ms", s * 1e3);
      std::printf("%s\n", j.str().c_str());
    }
  }
  return 0;
}
