// The ONNX fuzz target (fuzz/onnx_fuzz_target.h) inside the normal test suite: every fixture
// model of tests/fixtures/onnx must run end to end (parse, load, plan, forward, backward),
// and seeded mutations of them (MutateOnnx: bit flips, truncations, inserted bytes,
// duplicated ranges, ...) must each end in a clear error or a run, never in a violation or a
// crash. Regression cases for the bugs the fuzzer found follow, each built as a graph and
// written with the ONNX writer.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/graph/graph.h"
#include "core/onnx/onnx_writer.h"
#include "core/rng.h"
#include "fuzz/onnx_fuzz_target.h"
#include "onnx/onnx_pb.h"

namespace fedmesh::fuzz {
namespace {

// Mutated inputs: under two seconds in a Release build.
constexpr int kMutations = 20000;

struct Fixture {
  std::string name;  // "resnet_bn/model_train.onnx"
  std::vector<uint8_t> bytes;
};

std::vector<Fixture> Fixtures() {
  const std::filesystem::path dir = std::string(FEDMESH_SOURCE_DIR) + "/tests/fixtures/onnx";
  std::vector<Fixture> out;
  for (const auto& sub : std::filesystem::directory_iterator(dir)) {
    if (!sub.is_directory()) continue;
    for (const auto& f : std::filesystem::directory_iterator(sub.path())) {
      if (f.path().extension() != ".onnx") continue;
      std::ifstream in(f.path(), std::ios::binary);
      out.push_back({sub.path().filename().string() + "/" + f.path().filename().string(),
                     std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {})});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const Fixture& a, const Fixture& b) { return a.name < b.name; });
  return out;
}

OnnxOutcome RunBytes(const std::vector<uint8_t>& bytes) {
  return RunOnnxInput(bytes.data(), bytes.size());
}

// Writes a failing input where the libFuzzer binary can replay it, and says where.
std::string Saved(const std::vector<uint8_t>& bytes, const std::string& name) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return "input saved to " + path + " (replay: build-fuzz/onnx_fuzz " + path + ")";
}

std::vector<uint8_t> Serialized(const graph::Graph& g) {
  Result<std::string> s = onnx::SerializeOnnx(g);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::vector<uint8_t>(s->begin(), s->end()) : std::vector<uint8_t>{};
}

// Regression models: input x (dims `x`, float unless `ids`), output y, the given nodes.
graph::Graph Model(std::vector<graph::Node> nodes, std::vector<graph::Tensor> inits = {},
                   graph::Dims x = {-1, 4}, bool ids = false) {
  graph::Graph g;
  g.opset = 17;
  g.inputs = {{"x", ids ? graph::DType::kInt64 : graph::DType::kFloat32, std::move(x)}};
  g.outputs = {{"y", graph::DType::kFloat32, {-1}}};
  g.nodes = std::move(nodes);
  g.initializers = std::move(inits);
  return g;
}

graph::Node Op(std::string type, std::vector<std::string> in, std::vector<std::string> out) {
  graph::Node n;
  n.op_type = std::move(type);
  n.name = n.op_type;
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

graph::Node With(graph::Node n, const std::string& key, std::vector<int64_t> ints) {
  n.attrs[key].kind = graph::Attribute::Kind::kInts;
  n.attrs[key].ints = std::move(ints);
  return n;
}

graph::Node With(graph::Node n, const std::string& key, int64_t i) {
  n.attrs[key].kind = graph::Attribute::Kind::kInt;
  n.attrs[key].i = i;
  return n;
}

graph::Tensor Ints(std::string name, std::vector<int64_t> v) {
  return {std::move(name), graph::DType::kInt64, {static_cast<int64_t>(v.size())}, {}, v};
}

graph::Tensor Floats(std::string name, graph::Dims dims, float value) {
  graph::Tensor t{std::move(name), graph::DType::kFloat32, dims, {}, {}};
  t.f.assign(static_cast<size_t>(graph::NumElements(dims)), value);
  return t;
}

struct Case {
  std::string name;
  graph::Graph g;
  OnnxOutcome want;
};

void ExpectOutcomes(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const OnnxOutcome o = RunBytes(Serialized(c.g));
    EXPECT_EQ(o, c.want) << c.name << ": " << OnnxOutcomeName(o) << " instead of "
                         << OnnxOutcomeName(c.want) << " " << OnnxViolationMessage();
  }
}

TEST(OnnxFuzzTarget, EveryFixtureModelRunsEndToEnd) {
  const std::vector<Fixture> fixtures = Fixtures();
  ASSERT_GE(fixtures.size(), 12u) << "fixture models missing from tests/fixtures/onnx";
  for (const Fixture& f : fixtures) {
    const OnnxOutcome o = RunBytes(f.bytes);
    EXPECT_EQ(o, OnnxOutcome::kRan)
        << f.name << ": " << OnnxOutcomeName(o) << " " << OnnxViolationMessage();
    EXPECT_EQ(FuzzOnnxModel(f.bytes.data(), f.bytes.size()), 0);
  }
}

TEST(OnnxFuzzTarget, GarbageAndCutFilesAreParseErrors) {
  EXPECT_EQ(RunOnnxInput(nullptr, 0), OnnxOutcome::kParseRejected);
  const std::vector<uint8_t> text = {'n', 'o', 't', ' ', 'o', 'n', 'n', 'x'};
  EXPECT_EQ(RunBytes(text), OnnxOutcome::kParseRejected);
  const std::vector<Fixture> fixtures = Fixtures();
  ASSERT_FALSE(fixtures.empty());
  std::vector<uint8_t> cut = fixtures[0].bytes;
  cut.resize(cut.size() / 2);
  EXPECT_EQ(RunBytes(cut), OnnxOutcome::kParseRejected);
  // Over the target's 1 MiB limit: refused before protobuf sees it.
  EXPECT_EQ(RunBytes(std::vector<uint8_t>((size_t{1} << 20) + 1, 0)), OnnxOutcome::kParseRejected);
}

TEST(OnnxFuzzTarget, MutationsAreSeededAndChangeTheInput) {
  const std::vector<uint8_t> seed(100, 0x5A);
  Rng a(7), b(7);
  int changed = 0;
  for (int i = 0; i < 50; ++i) {
    const std::vector<uint8_t> x = MutateOnnx(seed, a);
    EXPECT_EQ(x, MutateOnnx(seed, b));
    changed += x != seed;
  }
  EXPECT_GE(changed, 45);
}

TEST(OnnxFuzzCorpus, MutatedFixturesGiveClearErrorsOrRun) {
  const std::vector<Fixture> fixtures = Fixtures();
  ASSERT_FALSE(fixtures.empty());
  Rng rng(0x0AA5F022);
  std::map<OnnxOutcome, int> outcomes;
  for (int i = 0; i < kMutations; ++i) {
    const Fixture& f = fixtures[rng.UniformInt(fixtures.size())];
    const std::vector<uint8_t> m = MutateOnnx(f.bytes, rng);
    const OnnxOutcome o = RunBytes(m);
    ASSERT_NE(o, OnnxOutcome::kViolation)
        << "mutation " << i << " of " << f.name << ": " << OnnxViolationMessage() << "\n"
        << Saved(m, "onnx-fuzz-mutation-" + std::to_string(i) + ".onnx");
    ++outcomes[o];
  }
  std::string summary;
  for (const auto& [o, n] : outcomes) {
    summary += std::string(OnnxOutcomeName(o)) + ": " + std::to_string(n) + "  ";
  }
  // The mutations reach the reader's checks (protobuf and graph structure: most of them),
  // the kernel and shape checks (a few), and the executor.
  EXPECT_GE(outcomes[OnnxOutcome::kParseRejected], kMutations / 2) << summary;
  EXPECT_GE(outcomes[OnnxOutcome::kCreateRejected] + outcomes[OnnxOutcome::kPlanRejected],
            kMutations / 400)
      << summary;
  EXPECT_GE(outcomes[OnnxOutcome::kRan], kMutations / 20) << summary;
}

// Pad, Concat or Gather can make a tensor far larger than any the file declares: the plan
// refused nothing and allocated it (a 22 KB file asked for 600 MB and ran past the
// fuzzer's 10 s timeout). Plan now holds every output to GraphLimits::max_tensor_elements.
TEST(OnnxFuzzRegression, PlannedTensorsAreHeldToTheLimit) {
  ExpectOutcomes({
      {"pad on the batch dim",
       Model({Op("Pad", {"x", "p"}, {"y"})}, {Ints("p", {1 << 21, 0, 0, 0})}),
       OnnxOutcome::kPlanRejected},
      {"pad within the limit", Model({Op("Pad", {"x", "p"}, {"y"})}, {Ints("p", {1, 0, 1, 0})}),
       OnnxOutcome::kRan},
  });
}

// Ops whose factory did not check that the data input exists: InferShapes read in[0] of an
// empty vector, or Forward read a null pointer.
TEST(OnnxFuzzRegression, OpsWithoutTheirDataInputAreRefusedAtLoad) {
  std::vector<Case> cases;
  const graph::Node relu = Op("Relu", {"x"}, {"y"});
  for (const char* op : {"Transpose", "Flatten", "Softmax", "LogSoftmax", "ReduceMean", "ReduceSum",
                         "Dropout", "Squeeze", "Concat"}) {
    for (const std::vector<std::string>& in :
         {std::vector<std::string>{}, std::vector<std::string>{""}}) {
      cases.push_back({std::string(op) + " with " + std::to_string(in.size()) + " inputs",
                       Model({With(Op(op, in, {"h"}), "axis", 0), relu}),
                       OnnxOutcome::kCreateRejected});
    }
  }
  cases.push_back({"Concat with an unnamed second input",
                   Model({With(Op("Concat", {"x", ""}, {"h"}), "axis", 0), relu}),
                   OnnxOutcome::kCreateRejected});
  cases.push_back({"Unsqueeze without data",
                   Model({Op("Unsqueeze", {"", "a"}, {"h"}), relu}, {Ints("a", {0})}),
                   OnnxOutcome::kCreateRejected});
  cases.push_back({"Reshape without data",
                   Model({Op("Reshape", {"", "s"}, {"h"}), relu}, {Ints("s", {-1, 4})}),
                   OnnxOutcome::kCreateRejected});
  cases.push_back({"Pad without data",
                   Model({Op("Pad", {"", "p"}, {"h"}), relu}, {Ints("p", {0, 0})}),
                   OnnxOutcome::kCreateRejected});
  cases.push_back({"Gather without indices",
                   Model({Op("Gather", {"W", ""}, {"h"}), relu}, {Floats("W", {3, 4}, 1.0f)}),
                   OnnxOutcome::kCreateRejected});
  cases.push_back({"Gather without data",
                   Model({Op("Gather", {"", "x"}, {"y"})}, {}, {-1, 4}, /*ids=*/true),
                   OnnxOutcome::kCreateRejected});
  ExpectOutcomes(cases);
}

// Every kernel writes its first output; the executor handed it a null pointer (an
// unnamed output) or indexed an empty vector (no output).
TEST(OnnxFuzzRegression, NodesWithoutTheirFirstOutputAreRefusedAtLoad) {
  const graph::Node relu = Op("Relu", {"x"}, {"y"});
  ExpectOutcomes({
      {"Relu with no output", Model({Op("Relu", {"x"}, {}), relu}), OnnxOutcome::kCreateRejected},
      {"Relu with an unnamed output", Model({Op("Relu", {"x"}, {""}), relu}),
       OnnxOutcome::kCreateRejected},
      {"Gemm with an unnamed output",
       Model({Op("Gemm", {"x", "W"}, {""}), relu}, {Floats("W", {4, 4}, 1.0f)}),
       OnnxOutcome::kCreateRejected},
      // A later output may stay unnamed.
      {"Dropout without its mask", Model({Op("Dropout", {"x"}, {"y", ""})}), OnnxOutcome::kRan},
  });
}

// More outputs than the op gives was reported as Internal (a bug in fedmesh) rather than as
// a bad file.
TEST(OnnxFuzzRegression, MoreOutputsThanTheOpGivesIsABadFile) {
  ExpectOutcomes({{"Relu with two outputs", Model({Op("Relu", {"x"}, {"y", "z"})}),
                   OnnxOutcome::kPlanRejected}});
}

// Dims, pads, strides and kernel sizes near INT64_MAX overflowed int64 in the shape
// arithmetic (undefined behaviour; UBSan traps on it).
TEST(OnnxFuzzRegression, ShapeArithmeticThatWouldOverflowIsRefused) {
  constexpr int64_t kHuge = int64_t{1} << 62;
  constexpr int64_t k2p40 = int64_t{1} << 40;
  const graph::Dims image = {-1, 1, 4, 4};
  const graph::Tensor w = Floats("W", {1, 1, 2, 2}, 1.0f);
  ExpectOutcomes({
      {"Pad by 2^62", Model({Op("Pad", {"x", "p"}, {"y"})}, {Ints("p", {0, kHuge, 0, kHuge})}),
       OnnxOutcome::kPlanRejected},
      {"Pad by INT64_MAX", Model({Op("Pad", {"x", "p"}, {"y"})}, {Ints("p", {0, INT64_MAX, 0, 1})}),
       OnnxOutcome::kPlanRejected},
      {"Reshape to 2^40 x 2^40 x -1",
       Model({Op("Reshape", {"x", "s"}, {"y"})}, {Ints("s", {k2p40, k2p40, -1})}),
       OnnxOutcome::kPlanRejected},
      {"Conv padded by 2^62",
       Model({With(Op("Conv", {"x", "W"}, {"y"}), "pads", {kHuge, kHuge, 0, 0})}, {w}, image),
       OnnxOutcome::kCreateRejected},
      {"Conv padded by INT64_MAX",
       Model({With(Op("Conv", {"x", "W"}, {"y"}), "pads", {INT64_MAX, 1, 0, 0})}, {w}, image),
       OnnxOutcome::kCreateRejected},
      {"MaxPool with a 2^62 kernel",
       Model({With(With(Op("MaxPool", {"x"}, {"y"}), "kernel_shape", {kHuge, 1}), "pads",
                   {kHuge - 1, 0, kHuge - 1, 0})},
             {}, image),
       OnnxOutcome::kCreateRejected},
      {"AveragePool with an INT64_MAX stride and ceil_mode",
       Model({With(With(With(Op("AveragePool", {"x"}, {"y"}), "kernel_shape", {2, 1}), "strides",
                        {INT64_MAX, 1}),
                   "ceil_mode", 1)},
             {}, image),
       OnnxOutcome::kCreateRejected},
      // The largest kernel allowed, almost all over padding: six windows per axis, each
      // clipped to the 4 x 4 input (its work estimate overflowed int64).
      {"MaxPool with a 2^31-1 kernel",
       Model({With(With(Op("MaxPool", {"x"}, {"y"}), "kernel_shape", {INT32_MAX, INT32_MAX}),
                   "pads", {1 << 30, 1 << 30, 1 << 30, 1 << 30})},
             {}, image),
       OnnxOutcome::kRan},
  });
}

// An axis given twice made Unsqueeze read past the end of the input dims.
TEST(OnnxFuzzRegression, UnsqueezeWithARepeatedAxisIsRefused) {
  ExpectOutcomes(
      {{"Unsqueeze axes [0, 0]", Model({Op("Unsqueeze", {"x", "a"}, {"y"})}, {Ints("a", {0, 0})}),
        OnnxOutcome::kPlanRejected}});
}

// Gather converted its float indices to int64 before checking them: NaN or 1e30 is
// undefined behaviour.
TEST(OnnxFuzzRegression, GatherIndicesBeyondInt64AreOutOfRange) {
  const graph::Tensor big = Floats("C", {1}, 1e30f);
  const graph::Tensor table = Floats("W", {3, 4}, 1.0f);
  ExpectOutcomes({
      {"index 1e30",
       Model({Op("Mul", {"x", "C"}, {"i"}), Op("Gather", {"W", "i"}, {"y"})}, {table, big}),
       OnnxOutcome::kForwardRejected},
      {"index NaN (log of a negative input)",
       Model({Op("Log", {"x"}, {"i"}), Op("Gather", {"W", "i"}, {"y"})}, {table}),
       OnnxOutcome::kForwardRejected},
  });
}

// Softmax over an axis of length 0 read the "first element" of every row, past the end of
// its input.
TEST(OnnxFuzzRegression, SoftmaxOverAnEmptyAxisRuns) {
  ExpectOutcomes(
      {{"Softmax over [N, 0, 3] axis 1",
        Model({With(Op("Softmax", {"x"}, {"y"}), "axis", 1)}, {}, {-1, 0, 3}), OnnxOutcome::kRan}});
}

// Empty tensors: memcpy from a null pointer (an empty raw_data in the reader, an empty
// initializer copied into an empty parameter buffer), undefined even for zero bytes.
TEST(OnnxFuzzRegression, EmptyTensorsRun) {
  const graph::Graph g = Model({Op("Add", {"x", "Z"}, {"y"})}, {Floats("Z", {0}, 0.0f)}, {-1, 0});
  ExpectOutcomes({{"x [N, 0] + Z [0]", g, OnnxOutcome::kRan}});
  // The same model with Z's data as an explicit, empty raw_data field.
  ::onnx::ModelProto proto;
  const std::vector<uint8_t> bytes = Serialized(g);
  ASSERT_TRUE(proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())));
  ASSERT_EQ(proto.graph().initializer_size(), 1);
  proto.mutable_graph()->mutable_initializer(0)->set_raw_data("");
  const std::string raw = proto.SerializeAsString();
  EXPECT_EQ(RunBytes(std::vector<uint8_t>(raw.begin(), raw.end())), OnnxOutcome::kRan)
      << OnnxViolationMessage();
}

}  // namespace
}  // namespace fedmesh::fuzz
