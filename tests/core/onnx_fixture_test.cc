// fedmesh's graph executor against PyTorch on the fixtures of tests/fixtures/onnx
// (made by make_fixtures.py with torch.onnx.export): forward outputs in evaluation and in
// training mode, gradients of every parameter and of the input, and the BatchNorm
// running statistics after one training step, all within 1e-4 of PyTorch's. The same on
// a GPU (PyTorchOnCuda/...: the CUDA graph kernels; skipped without a device).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <fstream>
#include <ostream>
#include <string>

#include "core/backend.h"
#include "core/cuda/cuda_backend.h"
#include "core/cuda/device_info.h"
#include "core/graph/graph_model.h"
#include "core/onnx/onnx_reader.h"

namespace fedmesh::graph {
namespace {

const std::string kDir = std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/onnx/";

std::vector<float> Floats(const Tensor& t) {
  if (t.dtype == DType::kFloat32) return t.f;
  return std::vector<float>(t.i.begin(), t.i.end());
}

Tensor Load(const std::string& fixture, const std::string& file) {
  auto t = onnx::ReadOnnxTensorFile(kDir + fixture + "/" + file);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Tensor{};
}

// Dropout ratio 0: the references were computed with every nn.Dropout's p set to 0.
void DisableDropout(Graph* g) {
  for (Node& n : g->nodes)
    if (n.op_type == "Dropout") n.inputs.resize(1), n.attrs.erase("ratio");
  for (Node& n : g->nodes)
    if (n.op_type == "Dropout") n.attrs["ratio"].kind = Attribute::Kind::kFloat;
}

// Infinity where a value is NaN (std::max would skip it, and a NaN gradient pass).
double MaxAbsDiff(const float* a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = std::fabs(double(a[i]) - b[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

struct Case {
  std::string fixture, model;
  bool cuda = false;  // run on CUDA device 0
};
// How gtest and CTest name a case (not a dump of its bytes).
void PrintTo(const Case& c, std::ostream* os) { *os << c.fixture << "/" << c.model << (c.cuda ? " on cuda" : ""); }

class OnnxFixture : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().cuda) {
      if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: " << CudaUnavailableReason();
      auto made = MakeCudaBackend(0);
      ASSERT_TRUE(made.ok()) << made.status().ToString();
      backend_ = std::move(*made);
    } else {
      backend_ = MakeCpuBackend(2);
    }
    auto g = onnx::ReadOnnxFile(kDir + GetParam().fixture + "/" + GetParam().model);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    DisableDropout(&*g);
    GraphModelOptions o;
    o.input_gradients = true;
    o.poison_plans = true;  // gradients an overwriting kernel left unwritten show as NaN
    auto m = GraphModel::Create(std::move(*g), backend_.get(), o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(*m);
    x_ = Floats(Load(GetParam().fixture, "x.pb"));
  }
  Status Run(bool training) {
    FM_RETURN_IF_ERROR(model_->Plan(4));
    backend_->CopyFromHost(model_->input(0, 4), x_.data(), x_.size() * sizeof(float));
    FM_RETURN_IF_ERROR(model_->Forward(4, training, 7));
    return backend_->Synchronize();
  }
  // n values of the model's memory (a GPU's on CUDA) from p.
  std::vector<float> Host(const float* p, size_t n) {
    std::vector<float> v(n);
    backend_->CopyToHost(v.data(), p, n * sizeof(float));
    return v;
  }
  double Diff(const float* p, const std::vector<float>& want) {
    return MaxAbsDiff(Host(p, want.size()).data(), want);
  }
  bool IsTrainExport() const { return GetParam().model.rfind("model_train", 0) == 0; }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<GraphModel> model_;
  std::vector<float> x_;
};

TEST_P(OnnxFixture, EvalOutputEqualsPyTorch) {
  ASSERT_TRUE(Run(false).ok());
  const std::vector<float> want = Load(GetParam().fixture, "y_eval.pb").f;
  ASSERT_EQ(graph::NumElements(model_->output_dims(0)), static_cast<int64_t>(want.size()));
  EXPECT_LE(Diff(model_->output(0), want), 1e-4);
}

TEST_P(OnnxFixture, TrainOutputGradientsAndRunningStatsEqualPyTorch) {
  if (!IsTrainExport()) GTEST_SKIP() << "the eval export has BatchNorm folded: no training form";
  const std::string& f = GetParam().fixture;
  ASSERT_TRUE(Run(true).ok());
  const std::vector<float> want = Load(f, "y_train.pb").f;
  EXPECT_LE(Diff(model_->output(0), want), 1e-4);
  const std::vector<float> r = Load(f, "r.pb").f;
  backend_->CopyFromHost(model_->output_grad(0), r.data(), r.size() * sizeof(float));
  model_->Backward();
  ASSERT_TRUE(backend_->Synchronize().ok());
  std::ifstream list(kDir + f + "/grads.txt");
  std::string file, name;
  int checked = 0;
  while (list >> file >> name) {
    const std::vector<float> g = Load(f, file).f;
    bool found = false;
    for (const TensorSlot& s : model_->param_slots())
      if (s.name == name) {
        found = true;
        ASSERT_EQ(s.size, g.size()) << name;
        EXPECT_LE(Diff(model_->grads() + s.offset, g), 1e-4) << "gradient of " << name;
        ++checked;
      }
    EXPECT_TRUE(found) << name << " is not a trainable parameter";
  }
  EXPECT_GT(checked, 3);
  EXPECT_EQ(static_cast<size_t>(checked), model_->param_slots().size());
  if (model_->input_grad(0)) {
    EXPECT_LE(Diff(model_->input_grad(0), Load(f, "dx.pb").f), 1e-4) << "d loss / d x";
  }
  for (const TensorSlot& s : model_->state_slots()) {
    const std::vector<float> after = Load(f, "bn_after_" + s.name + ".pb").f;
    EXPECT_LE(Diff(model_->params() + s.offset, after), 1e-5) << s.name;
  }
}

std::vector<Case> Cases(bool cuda) {
  std::vector<Case> cases = {
      {"resnet_bn", "model_train.onnx"}, {"resnet_bn", "model_train_op13.onnx"}, {"resnet_bn", "model_eval.onnx"},
      {"tabular_mlp", "model_train.onnx"}, {"tabular_mlp", "model_train_op13.onnx"},
      {"tabular_mlp", "model_eval.onnx"}, {"embedding", "model_train.onnx"}, {"embedding", "model_eval.onnx"},
      {"opzoo", "model_train.onnx"}, {"opzoo", "model_eval.onnx"}, {"opzoo_logsoftmax", "model_train.onnx"},
      {"opzoo_logsoftmax", "model_eval.onnx"}};
  for (Case& c : cases) c.cuda = cuda;
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.fixture + "_" + info.param.model;
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(PyTorch, OnnxFixture, ::testing::ValuesIn(Cases(false)), CaseName);
// The same fixtures through the CUDA graph kernels.
INSTANTIATE_TEST_SUITE_P(PyTorchOnCuda, OnnxFixture, ::testing::ValuesIn(Cases(true)), CaseName);

TEST(OnnxFixtureStructure, ResnetHasBatchNormStateAndTheFlatVectorOrder) {
  auto backend = MakeCpuBackend(1);
  auto g = onnx::ReadOnnxFile(kDir + "resnet_bn/model_train.onnx");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto m = GraphModel::Create(std::move(*g), backend.get());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // 20 trainable tensors first (initializer order), then 8 running statistics.
  ASSERT_EQ((*m)->param_slots().size(), 20u);
  ASSERT_EQ((*m)->state_slots().size(), 8u);
  EXPECT_EQ((*m)->param_slots()[0].name, "conv1.weight");
  EXPECT_EQ((*m)->param_slots()[0].offset, 0u);
  EXPECT_EQ((*m)->state_slots()[0].offset, (*m)->num_trainable());
  EXPECT_EQ((*m)->num_flat(), (*m)->num_trainable() + (*m)->num_state());
}

TEST(OnnxFixtureStructure, HashIgnoresWeightsButNotArchitecture) {
  auto a = onnx::ReadOnnxFile(kDir + "tabular_mlp/model_train.onnx");
  auto b = onnx::ReadOnnxFile(kDir + "tabular_mlp/model_train.onnx");
  auto c = onnx::ReadOnnxFile(kDir + "tabular_mlp/model_eval.onnx");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  for (Tensor& t : b->initializers)
    if (t.dtype == DType::kFloat32 && !t.dims.empty()) t.f[0] += 1.0f;
  EXPECT_EQ(CanonicalHash(*a), CanonicalHash(*b));
  EXPECT_NE(CanonicalHash(*a), CanonicalHash(*c));
  EXPECT_EQ(CanonicalHash(*a).size(), 64u);
}

}  // namespace
}  // namespace fedmesh::graph

namespace fedmesh::graph {
namespace {

// BackwardSgd (Gemm weights and biases stepped inside the kernel, the rest by SgdStep)
// equals Backward followed by one SGD step, up to rounding, and moves the weights.
TEST(OnnxFixtureStructure, FusedSgdStepEqualsBackwardThenStep) {
  for (const char* fixture : {"resnet_bn", "tabular_mlp", "embedding", "opzoo"}) {
    SCOPED_TRACE(fixture);
    auto backend = MakeCpuBackend(1);
    auto ga = onnx::ReadOnnxFile(kDir + fixture + "/model_train.onnx");
    auto gb = onnx::ReadOnnxFile(kDir + fixture + "/model_train.onnx");
    ASSERT_TRUE(ga.ok() && gb.ok());
    DisableDropout(&*ga);
    DisableDropout(&*gb);
    auto a = GraphModel::Create(std::move(*ga), backend.get());
    auto b = GraphModel::Create(std::move(*gb), backend.get());
    ASSERT_TRUE(a.ok() && b.ok());
    const std::vector<float> x = Floats(Load(fixture, "x.pb"));
    const std::vector<float> r = Load(fixture, "r.pb").f;
    const float lr = 0.05f;
    for (GraphModel* m : {a->get(), b->get()}) {
      ASSERT_TRUE(m->Plan(4).ok());
      std::copy(x.begin(), x.end(), m->input(0, 4));
      ASSERT_TRUE(m->Forward(4, true, 3).ok());
      std::copy(r.begin(), r.end(), m->output_grad(0));
    }
    const std::vector<float> before((*a)->params(), (*a)->params() + (*a)->num_flat());
    (*a)->Backward();
    backend->SgdStep((*a)->params(), (*a)->grads(), nullptr, nullptr, (*a)->num_trainable(),
                     SgdStepParams{.lr = lr});
    (*b)->BackwardSgd(lr);
    double moved = 0;
    for (size_t i = 0; i < (*a)->num_flat(); ++i) {
      ASSERT_NEAR((*a)->params()[i], (*b)->params()[i], 1e-6) << "element " << i;
      moved = std::max(moved, std::fabs(double((*a)->params()[i]) - before[i]));
    }
    EXPECT_GT(moved, 1e-4);
  }
}

}  // namespace
}  // namespace fedmesh::graph
