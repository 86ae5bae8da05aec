// Training throughput of a fedmesh backend (--device cpu, cuda, cuda:N) on real
// Fashion-MNIST: warm-up steps, then `steps` timed SGD+momentum steps on batches already in
// memory (as the PyTorch baseline, bench/torch_train_throughput.py, does). On a GPU fedmesh
// still copies each batch from its host dataset and reads the loss back every step (as
// its trainer does), while the torch baseline keeps its batches on the device: that
// favours torch. The clock stops after the backend's Synchronize(). Prints one JSON line.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <numeric>

#include "core/data/fashion_mnist.h"
#include "core/json_line.h"
#include "core/model_zoo.h"
#include "core/sgd.h"

int main(int argc, char** argv) {
  std::string model_name = "mlp", device = "cpu", engine = "auto";
  int batch = 32, threads = 2, steps = 300, warmup = 30;
  CLI::App app{"fedmesh training throughput"};
  app.add_option("--model", model_name);
  app.add_option("--batch", batch);
  app.add_option("--threads", threads);
  app.add_option("--steps", steps);
  app.add_option("--warmup", warmup);
  app.add_option("--device", device, "cpu, auto, cuda or cuda:N");
  app.add_option("--engine", engine, "built-in models: auto, graph or layers");
  CLI11_PARSE(app, argc, argv);

  auto data = fedmesh::LoadFashionMnist(fedmesh::DataSplit::kTrain);
  if (!data.ok()) {
    std::fprintf(stderr, "%s\n", data.status().ToString().c_str());
    return 2;
  }
  auto made = fedmesh::MakeBackend(device, threads);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return 2;
  }
  std::unique_ptr<fedmesh::Backend> backend = std::move(*made);
  fedmesh::ModelSpec spec;
  spec.name = model_name;
  auto engine_choice = fedmesh::ParseBuiltinEngine(engine);
  if (!engine_choice.ok()) {
    std::fprintf(stderr, "%s\n", engine_choice.status().ToString().c_str());
    return 2;
  }
  auto model = fedmesh::BuildModel(spec, backend.get(), {*engine_choice});
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 2;
  }
  auto& m = **model;
  m.InitParams(0);
  m.Reserve(batch);
  fedmesh::Sgd sgd(&m, {0.01f, 0.9f, 0.0f, 0.0f});
  const size_t n = data->size();
  double loss = 0;
  auto step = [&](int i) {
    m.LoadContiguousBatch(*data, (size_t(i) * batch) % (n - batch), batch);
    loss = m.ForwardBackward(batch, i).loss_sum / batch;
    sgd.Step();
  };
  for (int i = 0; i < warmup; ++i) step(i);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step(warmup + i);
  if (auto s = backend->Synchronize(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fedmesh::JsonLine j;
  j.Add("impl", "fedmesh").Add("device", backend->name()).Add("model", model_name)
      .Add("engine", m.executor_graph() ? "graph" : "layers").Add("batch", batch).Add("threads", threads)
      .Add("steps", steps).Add("seconds", secs).Add("samples_per_s", steps * double(batch) / secs)
      .Add("loss", loss);
  std::printf("%s\n", j.str().c_str());
  return 0;
}
