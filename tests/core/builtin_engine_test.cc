// The built-in models on the graph executor (BuiltinEngine::kGraph, the CPU default; also on
// a backend without host memory, as on a GPU) against the same models on the layer code: the
// same flat vector (initial values for a seed, layout), the same outputs, gradients and SGD
// steps up to rounding, the same DP-SGD clipped sums (both run the layers' per-example
// rules), and to the rest of fedmesh still the built-in model (no graph, no graph hash).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/backend.h"
#include "core/graph/graph_model.h"
#include "core/model.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "tests/core/staged_cpu_backend.h"

namespace fedmesh {
namespace {

struct Case {
  std::string name;
  SampleShape shape;
};

const Case kCases[] = {{"logreg", {28, 28, 1}}, {"mlp", {6, 5, 3}}, {"mlp", {12}},
                       {"cnn", {12, 8, 3}},      {"cnn", {8, 8, 1}}};

ModelSpec SpecOf(const Case& c) {
  ModelSpec spec;
  spec.name = c.name;
  spec.input_shape = c.shape;
  spec.num_classes = 4;
  spec.hidden = {16, 8};
  return spec;
}

Dataset RandomData(const SampleShape& shape, int n, uint64_t seed) {
  Dataset d;
  d.sample_shape = shape;
  d.num_classes = 4;
  Rng rng(seed);
  for (size_t i = 0; i < n * ShapeSize(shape); ++i) d.features.push_back(static_cast<float>(rng.Uniform(-1, 1)));
  for (int i = 0; i < n; ++i) d.labels.push_back(i % 4);
  return d;
}

// max |a - b| / (max |b| + 1e-6) over the two vectors.
double RelativeMaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0, scale = 1e-6;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return diff / scale;
}

struct Pair {
  std::unique_ptr<Backend> be_graph, be_layers;
  std::unique_ptr<Model> graph, layers;
};

// The graph model on the CPU (kAuto's choice there) or, staged, on a backend without host
// memory as on a GPU (an explicit kGraph there); the layer model on the CPU.
Pair Build(const ModelSpec& spec, bool staged = false) {
  Pair p;
  if (staged) {
    p.be_graph = std::make_unique<StagedCpuBackend>(1);
  } else {
    p.be_graph = MakeCpuBackend(1);
  }
  p.be_layers = MakeCpuBackend(1);
  auto g = BuildModel(spec, p.be_graph.get(), {staged ? BuiltinEngine::kGraph : BuiltinEngine::kAuto});
  auto l = BuildModel(spec, p.be_layers.get(), {BuiltinEngine::kLayers});
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  if (g.ok()) p.graph = std::move(*g);
  if (l.ok()) p.layers = std::move(*l);
  return p;
}

// Also with the graph on a backend without host memory (staged copies, as on a GPU).
TEST(BuiltinEngine, SameVectorOutputsGradientsAndStepsAsTheLayers) {
  for (const bool staged : {false, true})
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name + " " + ShapeToString(c.shape) + (staged ? " staged" : ""));
    const ModelSpec spec = SpecOf(c);
    Pair p = Build(spec, staged);
    ASSERT_TRUE(p.graph && p.layers);
    // Which executor: the graph runs it, yet to the federation it is the built-in.
    ASSERT_NE(p.graph->executor_graph(), nullptr);
    EXPECT_EQ(p.graph->graph_model(), nullptr);
    EXPECT_EQ(p.layers->executor_graph(), nullptr);
    EXPECT_EQ(p.graph->input_shape(), c.shape);
    EXPECT_EQ(p.graph->num_params(), p.layers->num_params());
    EXPECT_EQ(p.graph->num_trainable(), p.layers->num_trainable());
    // The same initial vector for the same seed, to the bit.
    p.graph->InitParams(11);
    p.layers->InitParams(11);
    ASSERT_EQ(p.graph->GetParams(), p.layers->GetParams());

    const int n = 6;
    const Dataset data = RandomData(c.shape, n, 3);
    ASSERT_TRUE(p.graph->CheckCompatible(data).ok());
    EXPECT_FALSE(p.graph->TakesChannelsFirst(data));  // the graph takes the samples as stored
    for (Model* m : {p.graph.get(), p.layers.get()}) {
      m->Reserve(n);
      m->LoadContiguousBatch(data, 0, n);
    }
    const auto eg = p.graph->Evaluate(n);
    const std::vector<float> logits_g(p.graph->logits(), p.graph->logits() + n * 4);
    const auto el = p.layers->Evaluate(n);
    const std::vector<float> logits_l(p.layers->logits(), p.layers->logits() + n * 4);
    EXPECT_LT(RelativeMaxDiff(logits_g, logits_l), 1e-5);
    EXPECT_NEAR(eg.loss_sum, el.loss_sum, 1e-4 * std::fabs(el.loss_sum));

    p.graph->ForwardBackward(n, 1);
    p.layers->ForwardBackward(n, 1);
    EXPECT_LT(RelativeMaxDiff(p.graph->GetGrads(), p.layers->GetGrads()), 1e-5);

    // Three fused SGD steps on shuffled batches: the vectors stay together.
    const std::vector<uint32_t> order = {5, 2, 0, 3, 1, 4};
    for (int step = 0; step < 3; ++step) {
      for (Model* m : {p.graph.get(), p.layers.get()}) {
        m->LoadBatch(data, order.data(), n);
        m->ForwardBackwardSgd(n, 7 + step, 0.1f);
      }
    }
    const std::vector<float> after = p.layers->GetParams();
    EXPECT_LT(RelativeMaxDiff(p.graph->GetParams(), after), 1e-5);
    p.layers->InitParams(11);
    EXPECT_GT(RelativeMaxDiff(after, p.layers->GetParams()), 1e-3);  // they did move
  }
}

// DP-SGD on a built-in on the graph runs its layers (bound to the graph's flat buffers) on
// the batch the graph's input holds: the clipped sum and the norms are the layer model's,
// bit for bit, and the graph trains on afterwards from the same buffers.
TEST(BuiltinEngine, ClippedBackwardIsTheLayersOwn) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name + " " + ShapeToString(c.shape));
    Pair p = Build(SpecOf(c));
    ASSERT_TRUE(p.graph && p.layers);
    p.graph->InitParams(4);
    p.layers->InitParams(4);
    const int n = 5;
    const Dataset data = RandomData(c.shape, n, 8);
    const std::vector<uint32_t> order = {4, 1, 3, 0, 2};
    std::vector<float> norms_g(n), norms_l(n);
    for (int round = 0; round < 2; ++round) {
      for (Model* m : {p.graph.get(), p.layers.get()}) {
        m->Reserve(n);
        m->LoadBatch(data, order.data(), n);
      }
      ASSERT_TRUE(p.graph->SupportsPerExampleClipping().ok());
      auto lg = p.graph->ForwardBackwardClipped(n, 2, 0.5, norms_g.data());
      auto ll = p.layers->ForwardBackwardClipped(n, 2, 0.5, norms_l.data());
      ASSERT_TRUE(lg.ok()) << lg.status().ToString();
      ASSERT_TRUE(ll.ok());
      EXPECT_EQ(lg->loss_sum, ll->loss_sum);
      EXPECT_EQ(norms_g, norms_l);
      EXPECT_EQ(p.graph->GetGrads(), p.layers->GetGrads());
      // Clipping bites: some example's norm is over the bound (else the test says little).
      EXPECT_GT(*std::max_element(norms_l.begin(), norms_l.end()), 0.5f);
      // Back on the graph: its logits, not the layers', after the DP pass.
      p.graph->Evaluate(n);
      p.layers->Evaluate(n);
      const std::vector<float> a(p.graph->logits(), p.graph->logits() + n * 4);
      const std::vector<float> b(p.layers->logits(), p.layers->logits() + n * 4);
      EXPECT_LT(RelativeMaxDiff(a, b), 1e-5);
      // A larger batch next round: the layers' buffers grow with the graph's.
      if (round == 0) {
        for (Model* m : {p.graph.get(), p.layers.get()}) m->Reserve(n + 3);
      }
    }
  }
}

// As DP-SGD's loop runs it (set_clipped_passes): Poisson batches of changing sizes load
// straight into the layers, the clipped sums and the logits of each pass are the layer
// model's bit for bit, and the graph takes over again afterwards.
TEST(BuiltinEngine, ClippedPassesOfChangingSizesLoadIntoTheLayers) {
  for (const Case& c : {kCases[2], kCases[3]}) {
    SCOPED_TRACE(c.name + " " + ShapeToString(c.shape));
    Pair p = Build(SpecOf(c));
    ASSERT_TRUE(p.graph && p.layers);
    p.graph->InitParams(6);
    p.layers->InitParams(6);
    const Dataset data = RandomData(c.shape, 9, 2);
    std::vector<uint32_t> order(9);
    std::iota(order.begin(), order.end(), 0u);
    for (Model* m : {p.graph.get(), p.layers.get()}) m->Reserve(9);
    p.graph->set_clipped_passes(true);
    for (int batch : {3, 7, 1, 9, 4}) {
      SCOPED_TRACE(batch);
      std::vector<float> norms_g(batch), norms_l(batch);
      for (Model* m : {p.graph.get(), p.layers.get()}) m->LoadBatch(data, order.data() + (9 - batch), batch);
      auto lg = p.graph->ForwardBackwardClipped(batch, 5, 0.3, norms_g.data());
      auto ll = p.layers->ForwardBackwardClipped(batch, 5, 0.3, norms_l.data());
      ASSERT_TRUE(lg.ok() && ll.ok());
      EXPECT_EQ(norms_g, norms_l);
      EXPECT_EQ(p.graph->GetGrads(), p.layers->GetGrads());
      EXPECT_EQ(std::vector<float>(p.graph->logits(), p.graph->logits() + batch * 4),
                std::vector<float>(p.layers->logits(), p.layers->logits() + batch * 4));
    }
    p.graph->set_clipped_passes(false);
    for (Model* m : {p.graph.get(), p.layers.get()}) {
      m->LoadContiguousBatch(data, 0, 9);
      m->Evaluate(9);
    }
    EXPECT_LT(RelativeMaxDiff(std::vector<float>(p.graph->logits(), p.graph->logits() + 36),
                              std::vector<float>(p.layers->logits(), p.layers->logits() + 36)),
              1e-5);
  }
}

// The count CheckModelSize refuses by is the built model's own, for every built-in; a shape
// past 2^28 parameters is refused before any memory is taken (it used to end in bad_alloc).
TEST(BuiltinEngine, ParameterCountWithoutBuildingMatchesTheModelAndBoundsIt) {
  auto be = MakeCpuBackend(1);
  struct Case {
    const char* name;
    SampleShape shape;
    int classes;
    std::vector<int> hidden;
  };
  for (const Case& c : {Case{"logreg", {30}, 2, {}}, Case{"mlp", {28, 28, 1}, 10, {256}},
                        Case{"mlp", {7}, 1, {16, 8, 4}}, Case{"cnn", {28, 28, 1}, 10, {}},
                        Case{"cnn", {31, 30, 3}, 7, {}}}) {
    ModelSpec spec;
    spec.name = c.name;
    spec.input_shape = c.shape;
    spec.num_classes = c.classes;
    if (!c.hidden.empty()) spec.hidden = c.hidden;
    auto m = BuildModel(spec, be.get());
    ASSERT_TRUE(m.ok()) << c.name << ": " << m.status().ToString();
    EXPECT_EQ(BuiltinModelParams(spec), static_cast<double>((*m)->num_params())) << c.name << " " << ShapeToString(c.shape);
    EXPECT_TRUE(CheckModelSize(spec).ok());
  }
  ModelSpec logreg;
  logreg.name = "logreg";
  logreg.num_classes = 1;
  logreg.input_shape = {1 << 27};
  EXPECT_TRUE(CheckModelSize(logreg).ok());  // 2^27 + 1 parameters
  logreg.input_shape = {1 << 28};
  Status big = CheckModelSize(logreg);
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("would have 2.68e+08 parameters"), std::string::npos) << big.message();
  ModelSpec huge;
  huge.input_shape = {100000, 100000, 100000};
  auto refused = BuildModel(huge, be.get());
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("mlp over input"), std::string::npos) << refused.status().message();
}

TEST(BuiltinEngine, ChoiceIsParsedAndLayersStayOnRequest) {
  EXPECT_EQ(*ParseBuiltinEngine("auto"), BuiltinEngine::kAuto);
  EXPECT_EQ(*ParseBuiltinEngine("graph"), BuiltinEngine::kGraph);
  EXPECT_EQ(*ParseBuiltinEngine("layers"), BuiltinEngine::kLayers);
  auto bad = ParseBuiltinEngine("graphs");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, graph, layers"), std::string::npos);
  auto be = MakeCpuBackend(1);
  ModelSpec spec;
  spec.name = "cnn";
  auto layers = BuildModel(spec, be.get(), {BuiltinEngine::kLayers});
  ASSERT_TRUE(layers.ok());
  EXPECT_EQ((*layers)->executor_graph(), nullptr);
  EXPECT_FALSE((*layers)->layers().empty());
  // Shapes the layers refuse are refused on the graph too, with the layer's message.
  spec.input_shape = {12};
  auto tabular_cnn = BuildModel(spec, be.get(), {BuiltinEngine::kGraph});
  ASSERT_FALSE(tabular_cnn.ok());
  EXPECT_NE(tabular_cnn.status().message().find("cnn needs image input"), std::string::npos);
  // The summary says which executor trains it.
  spec.input_shape = {28, 28, 1};
  auto on_graph = BuildModel(spec, be.get());
  ASSERT_TRUE(on_graph.ok());
  EXPECT_NE((*on_graph)->Summary().find("trained as a graph of"), std::string::npos);
  EXPECT_EQ((*layers)->Summary().find("trained as a graph"), std::string::npos);
  // A backend without host memory (a GPU's place): auto picks the layers, graph on request.
  StagedCpuBackend device(1);
  auto on_device = BuildModel(spec, &device);
  ASSERT_TRUE(on_device.ok());
  EXPECT_EQ((*on_device)->executor_graph(), nullptr);
  auto graph_on_device = BuildModel(spec, &device, {BuiltinEngine::kGraph});
  ASSERT_TRUE(graph_on_device.ok()) << graph_on_device.status().ToString();
  EXPECT_NE((*graph_on_device)->executor_graph(), nullptr);
}

}  // namespace
}  // namespace fedmesh
