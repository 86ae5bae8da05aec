// The ONNX reader and writer, and what they refuse: truncated files, unsupported ops,
// dtypes and domains, NaN weights, tensors claiming more data than the file holds, and
// shapes that do not chain. Each error must name what is wrong; none may crash.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/backend.h"
#include "core/builtin_graph.h"
#include "core/model_zoo.h"
#include "core/rng.h"
#include "core/graph/graph_model.h"
#include "core/graph/inference_graph.h"
#include "core/model.h"
#include "core/onnx/onnx_reader.h"
#include "core/onnx/onnx_writer.h"
#include "onnx/onnx_pb.h"

namespace fedmesh {
namespace {

const std::string kDir = std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/onnx/";

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A two-layer model built by hand: x [N,3] -> Gemm(W [4,3], b) -> Relu -> y.
graph::Graph SmallGraph() {
  graph::Graph g;
  g.opset = 17;
  g.inputs = {{"x", graph::DType::kFloat32, {-1, 3}}};
  g.outputs = {{"y", graph::DType::kFloat32, {-1, 4}}};
  graph::Tensor w{"W", graph::DType::kFloat32, {4, 3}, {}, {}};
  for (int i = 0; i < 12; ++i) w.f.push_back(0.1f * i - 0.5f);
  graph::Tensor b{"b", graph::DType::kFloat32, {4}, {0.1f, -0.2f, 0.3f, 0.0f}, {}};
  g.initializers = {w, b};
  graph::Node gemm{"fc", "Gemm", {"x", "W", "b"}, {"h"}, {}};
  gemm.attrs["transB"].i = 1;
  g.nodes = {gemm, graph::Node{"act", "Relu", {"h"}, {"y"}, {}}};
  return g;
}

std::string Error(const Result<graph::Graph>& r) { return r.ok() ? "" : r.status().message(); }

TEST(OnnxReader, ReadsTheFixtureAndKeepsNamesOpsetAndDynamicBatch) {
  auto g = onnx::ReadOnnxFile(kDir + "resnet_bn/model_train.onnx");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->opset, 15);
  ASSERT_EQ(g->inputs.size(), 1u);
  EXPECT_EQ(g->inputs[0].dims, (graph::Dims{-1, 1, 28, 28}));
  EXPECT_NE(g->FindInitializer("conv1.weight"), nullptr);
  EXPECT_EQ(g->FindInitializer("conv1.weight")->dims, (graph::Dims{8, 1, 3, 3}));
}

TEST(OnnxReader, TruncatedFileIsRefused) {
  const std::string bytes = Slurp(kDir + "resnet_bn/model_train.onnx");
  for (size_t cut : {bytes.size() / 2, bytes.size() - 7, size_t{10}}) {
    auto g = onnx::ParseOnnx(std::string_view(bytes).substr(0, cut));
    ASSERT_FALSE(g.ok()) << "cut at " << cut;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(Error(g).find("truncated or not ONNX"), std::string::npos) << Error(g);
  }
  auto g = onnx::ParseOnnx("this is a text file, not a model");
  EXPECT_FALSE(g.ok());
}

TEST(OnnxReader, MissingFileNamesThePath) {
  auto g = onnx::ReadOnnxFile("/nonexistent/model.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("/nonexistent/model.onnx"), std::string::npos);
  // A directory (ifstream opens one and says it is 2^63 - 1 bytes long) is named as such.
  auto dir = onnx::ReadOnnxFile(::testing::TempDir());
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dir.status().message().find("is a directory, not an ONNX file"), std::string::npos) << dir.status().message();
}

TEST(OnnxReader, RoundTripThroughTheWriterKeepsEverything) {
  const graph::Graph g = SmallGraph();
  auto bytes = onnx::SerializeOnnx(g);
  ASSERT_TRUE(bytes.ok());
  auto back = onnx::ParseOnnx(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(graph::CanonicalHash(*back), [&] {
    graph::Graph h = g;
    EXPECT_TRUE(graph::Finalize(&h).ok());
    return graph::CanonicalHash(h);
  }());
  EXPECT_EQ(back->FindInitializer("W")->f, g.initializers[0].f);
}

::onnx::ModelProto ProtoOf(const graph::Graph& g) {
  ::onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(*onnx::SerializeOnnx(g)));
  return m;
}

TEST(OnnxReader, TensorClaimingTwoGibibytesIsRefusedBeforeAllocating) {
  ::onnx::ModelProto m = ProtoOf(SmallGraph());
  auto* t = m.mutable_graph()->mutable_initializer(0);
  t->clear_dims();
  t->add_dims(int64_t{1} << 29);  // 2 GiB of float32, with 48 bytes of data
  auto g = onnx::ParseOnnx(m.SerializeAsString());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(Error(g).find("claims 536870912 elements"), std::string::npos) << Error(g);
  EXPECT_NE(Error(g).find("'W'"), std::string::npos) << Error(g);
  t->clear_dims();
  t->add_dims(int64_t{1} << 40);
  g = onnx::ParseOnnx(m.SerializeAsString());
  ASSERT_FALSE(g.ok());
  EXPECT_NE(Error(g).find("more than"), std::string::npos) << Error(g);
}

TEST(OnnxReader, FileLargerThanTheLimitIsRefusedUnread) {
  onnx::ReaderLimits limits;
  limits.max_file_bytes = 100;
  auto g = onnx::ReadOnnxFile(kDir + "resnet_bn/model_train.onnx", limits);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(Error(g).find("the limit is 100"), std::string::npos) << Error(g);
}

TEST(OnnxReader, UnsupportedDtypeDomainAndOpsetAreNamed) {
  {
    ::onnx::ModelProto m = ProtoOf(SmallGraph());
    m.mutable_graph()->mutable_initializer(0)->set_data_type(::onnx::TensorProto::DOUBLE);
    auto g = onnx::ParseOnnx(m.SerializeAsString());
    ASSERT_FALSE(g.ok());
    EXPECT_NE(Error(g).find("initializer 'W' has ONNX element type 11"), std::string::npos)
        << Error(g);
  }
  {
    ::onnx::ModelProto m = ProtoOf(SmallGraph());
    m.mutable_graph()->mutable_node(0)->set_domain("com.microsoft");
    auto g = onnx::ParseOnnx(m.SerializeAsString());
    ASSERT_FALSE(g.ok());
    EXPECT_NE(Error(g).find("com.microsoft"), std::string::npos) << Error(g);
  }
  {
    ::onnx::ModelProto m = ProtoOf(SmallGraph());
    m.mutable_opset_import(0)->set_version(19);
    auto g = onnx::ParseOnnx(m.SerializeAsString());
    ASSERT_FALSE(g.ok());
    EXPECT_NE(Error(g).find("opset 19"), std::string::npos) << Error(g);
  }
  {
    ::onnx::ModelProto m = ProtoOf(SmallGraph());
    auto* t = m.mutable_graph()->mutable_initializer(1);
    t->set_data_location(::onnx::TensorProto::EXTERNAL);
    auto g = onnx::ParseOnnx(m.SerializeAsString());
    ASSERT_FALSE(g.ok());
    EXPECT_NE(Error(g).find("external file"), std::string::npos) << Error(g);
  }
}

TEST(OnnxReader, UndefinedValueAndCycleAreNamed) {
  graph::Graph g = SmallGraph();
  g.nodes[1].inputs[0] = "nowhere";
  auto r = onnx::ParseOnnx(*onnx::SerializeOnnx(g));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(Error(r).find("node 'act' (Relu) reads 'nowhere'"), std::string::npos) << Error(r);
  g = SmallGraph();
  g.nodes[0].inputs[0] = "y";  // fc reads act's output, act reads fc's
  g.inputs[0].name = "unused";
  r = onnx::ParseOnnx(*onnx::SerializeOnnx(g));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(Error(r).find("cycle"), std::string::npos) << Error(r);
}

TEST(GraphModelErrors, UnsupportedOpIsReportedByNameAtLoad) {
  auto be = MakeCpuBackend(1);
  graph::Graph g = SmallGraph();
  g.nodes[1].op_type = "Mish";
  auto m = graph::GraphModel::Create(g, be.get());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find("node 'act' (Mish): op type 'Mish' is not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Conv"), std::string::npos) << "the message lists the supported ops: " << msg;
}

TEST(GraphModelErrors, NonFiniteWeightsAreRefusedNamingTheTensor) {
  auto be = MakeCpuBackend(1);
  for (float bad : {NAN, INFINITY}) {
    graph::Graph g = SmallGraph();
    g.initializers[0].f[5] = bad;
    auto m = graph::GraphModel::Create(g, be.get());
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("initializer 'W' holds a non-finite value"),
              std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find("index 5"), std::string::npos);
  }
}

TEST(GraphModelErrors, ShapesThatDoNotChainFailAtCreationNamingTheNode) {
  auto be = MakeCpuBackend(1);
  graph::Graph g = SmallGraph();
  g.inputs[0].dims = {-1, 5};  // W is [4,3]: 5 features do not fit
  auto m = Model::CreateFromGraph("small", be.get(), g);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("node 'fc' (Gemm)"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("inner dimensions differ"), std::string::npos);
}

TEST(GraphModelErrors, DataOfTheWrongShapeIsRefused) {
  auto be = MakeCpuBackend(1);
  auto m = Model::CreateFromGraph("small", be.get(), SmallGraph());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Dataset d;
  d.sample_shape = {5};
  d.num_classes = 4;
  d.features.assign(10, 0.0f);
  d.labels = {0, 1};
  const Status s = (*m)->CheckCompatible(d);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expects [3]"), std::string::npos) << s.message();
}

TEST(GraphModelErrors, EmbeddingIndexOutOfRangeFailsTheStepWithAStatus) {
  auto be = MakeCpuBackend(1);
  auto g = onnx::ReadOnnxFile(kDir + "embedding/model_train.onnx");
  ASSERT_TRUE(g.ok());
  auto m = Model::CreateFromGraph("emb", be.get(), std::move(*g));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Dataset d;
  d.sample_shape = {4};
  d.num_classes = 2;
  d.features = {1, 2, 3, 4, 5, 6, 7, 50};  // ids live in [0, 50)
  d.labels = {0, 1};
  (*m)->Reserve(2);
  (*m)->LoadContiguousBatch(d, 0, 2);
  const auto r = (*m)->ForwardBackward(2, 1);
  EXPECT_TRUE(std::isnan(r.loss_sum));
  ASSERT_FALSE((*m)->status().ok());
  EXPECT_NE((*m)->status().message().find("index 50"), std::string::npos)
      << (*m)->status().message();
}

TEST(InferenceGraph, BatchNormLosesItsTrainingOutputsAndOutputsAreUnchanged) {
  auto be = MakeCpuBackend(2);
  auto g = onnx::ReadOnnxFile(kDir + "resnet_bn/model_train_op13.onnx");
  ASSERT_TRUE(g.ok());
  auto m = graph::GraphModel::Create(std::move(*g), be.get());
  ASSERT_TRUE(m.ok());
  graph::Graph inf = graph::InferenceGraph(**m);
  EXPECT_EQ(inf.opset, 17);
  for (const graph::Node& n : inf.nodes)
    if (n.op_type == "BatchNormalization") {
      EXPECT_EQ(n.outputs.size(), 1u);
      EXPECT_FALSE(n.Has("training_mode"));
    }
  auto bytes = onnx::SerializeOnnx(inf);
  ASSERT_TRUE(bytes.ok());
  auto back = onnx::ParseOnnx(*bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  auto m2 = graph::GraphModel::Create(std::move(*back), be.get());
  ASSERT_TRUE(m2.ok()) << m2.status().ToString();
  ASSERT_TRUE((*m)->Plan(3).ok() && (*m2)->Plan(3).ok());
  for (int i = 0; i < 3 * 28 * 28; ++i)
    (*m)->input(0, 3)[i] = (*m2)->input(0, 3)[i] = std::sin(0.01f * i);
  ASSERT_TRUE((*m)->Forward(3, false, 0).ok());
  ASSERT_TRUE((*m2)->Forward(3, false, 0).ok());
  for (int i = 0; i < 30; ++i) EXPECT_EQ((*m)->output(0)[i], (*m2)->output(0)[i]);
}

}  // namespace
}  // namespace fedmesh

namespace fedmesh {
namespace {

// The built-in models as ONNX graphs: the graph (NCHW, OIHW, permuted first Dense) gives
// the layer model's logits on the same samples, single-channel and three-channel images.
TEST(BuiltinGraph, GivesTheLayerModelsOutputs) {
  struct Case {
    std::string name;
    SampleShape shape;
  };
  for (const Case& c : {Case{"logreg", {28, 28, 1}}, Case{"mlp", {6, 5, 3}}, Case{"mlp", {12}},
                        Case{"cnn", {12, 8, 3}}, Case{"cnn", {28, 28, 1}}}) {
    SCOPED_TRACE(c.name + " " + ShapeToString(c.shape));
    auto be = MakeCpuBackend(1);
    ModelSpec spec;
    spec.name = c.name;
    spec.input_shape = c.shape;
    spec.num_classes = 4;
    spec.hidden = {16, 8};
    auto layers = BuildModel(spec, be.get(), {BuiltinEngine::kLayers});
    ASSERT_TRUE(layers.ok()) << layers.status().ToString();
    (*layers)->InitParams(5);
    auto g = BuiltinModelGraph(spec, (*layers)->GetParams());
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    // Through the ONNX writer and reader, as fedmesh-model exports it.
    auto back = onnx::ParseOnnx(*onnx::SerializeOnnx(*g));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    auto graph_model = Model::CreateFromGraph("g", be.get(), std::move(*back));
    ASSERT_TRUE(graph_model.ok()) << graph_model.status().ToString();
    Dataset hwc;
    hwc.sample_shape = c.shape;
    hwc.num_classes = 4;
    Rng rng(9);
    const int n = 3;
    for (size_t i = 0; i < n * ShapeSize(c.shape); ++i) hwc.features.push_back(static_cast<float>(rng.Uniform()));
    hwc.labels = {0, 1, 2};
    Dataset chw = hwc;  // the same samples in NCHW order for images
    if (c.shape.size() == 3) {
      const int H = c.shape[0], W = c.shape[1], C = c.shape[2];
      for (int s = 0; s < n; ++s)
        for (int h = 0; h < H; ++h)
          for (int w = 0; w < W; ++w)
            for (int ch = 0; ch < C; ++ch)
              chw.features[s * H * W * C + (ch * H + h) * W + w] =
                  hwc.features[s * H * W * C + (h * W + w) * C + ch];
      chw.sample_shape = {C, H, W};
    }
    (*layers)->Reserve(n);
    (*layers)->LoadContiguousBatch(hwc, 0, n);
    (*layers)->Evaluate(n);
    const std::vector<float> expected((*layers)->logits(), (*layers)->logits() + n * 4);
    (*graph_model)->Reserve(n);
    (*graph_model)->LoadContiguousBatch(chw, 0, n);
    (*graph_model)->Evaluate(n);
    for (int i = 0; i < n * 4; ++i) EXPECT_NEAR(expected[i], (*graph_model)->logits()[i], 1e-4) << i;
    // A Dataset's own images (HWC) go into the graph transposed, both ways of loading.
    EXPECT_EQ((*graph_model)->TakesChannelsFirst(hwc), c.shape.size() == 3 && c.shape[2] > 1);
    ASSERT_TRUE((*graph_model)->CheckCompatible(hwc).ok());
    (*graph_model)->LoadContiguousBatch(hwc, 0, n);
    (*graph_model)->Evaluate(n);
    for (int i = 0; i < n * 4; ++i) EXPECT_NEAR(expected[i], (*graph_model)->logits()[i], 1e-4) << i;
    const std::vector<uint32_t> order = {2, 0, 1};
    (*graph_model)->LoadBatch(hwc, order.data(), n);
    (*graph_model)->Evaluate(n);
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < 4; ++k)
        EXPECT_NEAR(expected[order[i] * 4 + k], (*graph_model)->logits()[i * 4 + k], 1e-4) << i;
  }
  ModelSpec spec;
  spec.name = "mlp";
  EXPECT_FALSE(BuiltinModelGraph(spec, std::vector<float>(7)).ok());
  auto text = SpecFromText(SpecToText(spec));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->hidden, spec.hidden);
  EXPECT_EQ(text->input_shape, spec.input_shape);
}

// A built-in model trained as its graph (the aggregator does, to put the federation's input
// normalization in front) keeps its Dropout: one node per Dropout layer, with its ratio,
// active in a training pass and not in evaluation, and it survives the ONNX writer.
TEST(BuiltinGraph, KeepsDropoutForTraining) {
  auto be = MakeCpuBackend(1);
  ModelSpec spec;
  spec.name = "mlp";
  spec.input_shape = {12};
  spec.num_classes = 3;
  spec.hidden = {16, 8};
  spec.dropout = 0.25f;
  auto layers = BuildModel(spec, be.get());
  ASSERT_TRUE(layers.ok());
  (*layers)->InitParams(5);
  BuiltinGraphOptions with;
  with.training_dropout = true;
  auto plain = BuiltinModelGraph(spec, (*layers)->GetParams());
  auto dropped = BuiltinModelGraph(spec, (*layers)->GetParams(), with);
  ASSERT_TRUE(plain.ok() && dropped.ok()) << dropped.status().ToString();
  int dropouts = 0;
  for (const graph::Node& n : dropped->nodes) dropouts += n.op_type == "Dropout";
  EXPECT_EQ(dropouts, 2);
  for (const graph::Node& n : plain->nodes) EXPECT_NE(n.op_type, "Dropout");
  auto back = onnx::ParseOnnx(*onnx::SerializeOnnx(*dropped));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  Dataset d;
  d.sample_shape = {12};
  d.num_classes = 3;
  Rng rng(2);
  for (int i = 0; i < 8 * 12; ++i) d.features.push_back(static_cast<float>(rng.Normal()));
  d.labels = {0, 1, 2, 0, 1, 2, 0, 1};
  auto run = [&](graph::Graph g, bool training) {
    auto m = Model::CreateFromGraph("g", be.get(), std::move(g));
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    (*m)->Reserve(8);
    (*m)->LoadContiguousBatch(d, 0, 8);
    return training ? (*m)->ForwardBackward(8, 77).loss_sum : (*m)->Evaluate(8).loss_sum;
  };
  EXPECT_FLOAT_EQ(run(*plain, false), run(*back, false));
  EXPECT_FLOAT_EQ(run(*plain, true), run(*plain, false));
  EXPECT_NE(run(*back, true), run(*plain, true)) << "dropout changes a training pass";
}

// Images whose height x width x channels is the model's size but not its shape are refused,
// not fed in the wrong order.
TEST(BuiltinGraph, RefusesImagesOfAnotherShape) {
  auto be = MakeCpuBackend(1);
  ModelSpec spec;
  spec.name = "logreg";
  spec.input_shape = {6, 4, 3};
  spec.num_classes = 2;
  auto layers = BuildModel(spec, be.get());
  ASSERT_TRUE(layers.ok());
  auto m = Model::CreateFromGraph("g", be.get(), *BuiltinModelGraph(spec, (*layers)->GetParams()));
  ASSERT_TRUE(m.ok());
  Dataset d;
  d.num_classes = 2;
  d.labels = {0};
  d.features.assign(72, 0.5f);
  d.sample_shape = {6, 4, 3};
  EXPECT_TRUE((*m)->CheckCompatible(d).ok());
  d.sample_shape = {4, 6, 3};
  const Status s = (*m)->CheckCompatible(d);
  EXPECT_NE(s.message().find("images of [4x6x3] (height x width x channels) do not fit model 'g', whose input "
                             "is [3x6x4]"),
            std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace fedmesh
