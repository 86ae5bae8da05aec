// The CUDA graph kernels against the CPU ones (the reference, itself checked by finite
// differences in graph_ops_test.cc and graph_conv_pool_norm_test.cc): a graph runs on both
// backends from the same parameters, inputs and random output gradients, and every
// output, every parameter and state value after the forward (BatchNorm's running
// statistics), every parameter gradient and every input gradient must agree. The CUDA
// model's planned buffers are filled with NaN first, so an element a kernel leaves
// unwritten shows; Backward runs twice on the GPU and must give the same gradients
// (the executor zeroes them; kernels accumulate).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/cuda/cuda_backend.h"
#include "core/cuda/device_info.h"
#include "core/graph/graph_model.h"
#include "tests/core/close_rel.h"
#include "tests/core/random_vector.h"

namespace fedmesh::graph {

#define FM_SKIP_WITHOUT_CUDA()                                                         \
  do {                                                                                 \
    if (::fedmesh::CudaDeviceCount() == 0)                                             \
      GTEST_SKIP() << "no CUDA device: " << ::fedmesh::CudaUnavailableReason();        \
  } while (0)

struct CudaCheckOptions {
  double rel = 1e-4;     // max |gpu - cpu| / max |cpu| per compared tensor
  bool training = true;  // Forward's mode (BatchNorm statistics, Dropout)
  int64_t batch = 1;     // the plan's batch (graphs without inputs ignore it)
  uint64_t seed = 42;    // Forward's seed (Dropout's mask) and the random values
  // Values of the graph inputs (indices for Gather, say); random normal where absent.
  std::vector<std::vector<float>> inputs;
};

inline std::vector<float> DeviceToHost(Backend& be, const float* p, size_t n) {
  std::vector<float> v(n);
  if (n > 0) be.CopyToHost(v.data(), p, n * sizeof(float));
  return v;
}

// A graph of one node over initializers `inits` (trainable where float and of rank >= 1)
// and run-time inputs `inputs`; its outputs "y", "y1", "y2"... (`outputs` of them) are
// all graph outputs.
inline Graph OneNodeGraph(Node node, std::vector<Tensor> inits, std::vector<ValueInfo> inputs = {},
                          int outputs = 1, int64_t opset = 17) {
  Graph g;
  g.opset = opset;
  g.initializers = std::move(inits);
  g.inputs = std::move(inputs);
  node.name = "n";
  node.outputs.clear();
  for (int k = 0; k < outputs; ++k) {
    node.outputs.push_back(k == 0 ? "y" : "y" + std::to_string(k));
    g.outputs.push_back({node.outputs.back(), DType::kFloat32, {}});
  }
  g.nodes = {std::move(node)};
  return g;
}

inline ::testing::AssertionResult CudaMatchesCpu(const Graph& g, const CudaCheckOptions& o = {}) {
  auto cpu_be = MakeCpuBackend(1);
  auto cuda_made = MakeCudaBackend(0);
  if (!cuda_made.ok()) return ::testing::AssertionFailure() << cuda_made.status().ToString();
  std::unique_ptr<Backend> cuda_be = std::move(*cuda_made);
  GraphModelOptions mo;
  mo.input_gradients = true;
  auto cpu_m = GraphModel::Create(g, cpu_be.get(), mo);
  if (!cpu_m.ok()) return ::testing::AssertionFailure() << "CPU: " << cpu_m.status().ToString();
  mo.poison_plans = true;
  auto gpu_m = GraphModel::Create(g, cuda_be.get(), mo);
  if (!gpu_m.ok()) return ::testing::AssertionFailure() << "CUDA: " << gpu_m.status().ToString();
  GraphModel& c = **cpu_m;
  GraphModel& d = **gpu_m;
  if (auto s = c.Plan(o.batch); !s.ok()) return ::testing::AssertionFailure() << s.ToString();
  if (auto s = d.Plan(o.batch); !s.ok()) return ::testing::AssertionFailure() << s.ToString();
  for (size_t k = 0; k < c.num_inputs(); ++k) {
    const size_t n = NumElements(c.input_dims(k, o.batch));
    std::vector<float> v = k < o.inputs.size() ? o.inputs[k] : RandomVector(n, o.seed + 100 + k);
    if (v.size() != n) return ::testing::AssertionFailure() << "input " << k << " needs " << n << " values";
    std::copy(v.begin(), v.end(), c.input(k, o.batch));
    cuda_be->CopyFromHost(d.input(k, o.batch), v.data(), n * sizeof(float));
  }
  if (auto s = c.Forward(o.batch, o.training, o.seed); !s.ok())
    return ::testing::AssertionFailure() << "CPU forward: " << s.ToString();
  if (auto s = d.Forward(o.batch, o.training, o.seed); !s.ok())
    return ::testing::AssertionFailure() << "CUDA forward: " << s.ToString();
  if (auto s = cuda_be->Synchronize(); !s.ok()) return ::testing::AssertionFailure() << s.ToString();
  for (size_t k = 0; k < c.num_outputs(); ++k) {
    const size_t n = NumElements(c.output_dims(k));
    if (c.output_dims(k) != d.output_dims(k))
      return ::testing::AssertionFailure() << "output " << k << " dims " << DimsToString(d.output_dims(k))
                                           << " vs " << DimsToString(c.output_dims(k));
    std::vector<float> want(c.output(k), c.output(k) + n);
    auto r = CloseRel(DeviceToHost(*cuda_be, d.output(k), n), want, o.rel, "output " + std::to_string(k));
    if (!r) return r;
  }
  {
    std::vector<float> want(c.params(), c.params() + c.num_flat());
    auto r = CloseRel(DeviceToHost(*cuda_be, d.params(), d.num_flat()), want, o.rel,
                      "parameters and state after the forward");
    if (!r) return r;
  }
  if (!o.training) return ::testing::AssertionSuccess();
  for (size_t k = 0; k < c.num_outputs(); ++k) {
    const size_t n = NumElements(c.output_dims(k));
    const std::vector<float> r = RandomVector(n, o.seed + 200 + k);
    std::copy(r.begin(), r.end(), c.output_grad(k));
    cuda_be->CopyFromHost(d.output_grad(k), r.data(), n * sizeof(float));
  }
  c.Backward();
  std::vector<float> first;
  for (int pass = 0; pass < 2; ++pass) {
    d.Backward();
    if (auto s = cuda_be->Synchronize(); !s.ok()) return ::testing::AssertionFailure() << s.ToString();
    std::vector<float> got = DeviceToHost(*cuda_be, d.grads(), d.num_trainable());
    std::vector<float> want(c.grads(), c.grads() + c.num_trainable());
    auto r = CloseRel(got, want, o.rel, "parameter gradients");
    if (!r) return r;
    if (pass == 0) {
      first = got;
    } else if (got != first) {
      return ::testing::AssertionFailure() << "a second Backward gave other gradients";
    }
  }
  for (size_t k = 0; k < c.num_inputs(); ++k) {
    if (g.inputs[k].dtype != DType::kFloat32 || c.input_grad(k) == nullptr) continue;
    const size_t n = NumElements(c.input_dims(k, o.batch));
    std::vector<float> want(c.input_grad(k), c.input_grad(k) + n);
    auto r = CloseRel(DeviceToHost(*cuda_be, d.input_grad(k), n), want, o.rel, "input gradient " + std::to_string(k));
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace fedmesh::graph
