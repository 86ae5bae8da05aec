#include "fuzz/onnx_fuzz_target.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string_view>

#include "core/backend.h"
#include "core/graph/graph_model.h"
#include "core/onnx/onnx_reader.h"
#include "core/status.h"

namespace fedmesh::fuzz {
namespace {

thread_local std::string g_violation;

// Small enough that a file cannot make the executor allocate gigabytes or run for
// seconds, large enough for every fixture.
onnx::ReaderLimits Limits() {
  onnx::ReaderLimits limits;
  limits.max_file_bytes = size_t{1} << 20;
  limits.graph.max_nodes = 256;
  limits.graph.max_tensor_elements = int64_t{1} << 20;
  return limits;
}

// One backend for every input: creating it per input would dominate the run time. One
// thread, so a run does not depend on the machine.
Backend& CpuBackend() {
  static Backend* const backend = MakeCpuBackend(1).release();
  return *backend;
}

// The codes a bad file may cause.
bool ClearError(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kUnimplemented:
    case StatusCode::kOutOfRange:
    case StatusCode::kNotFound:
      return true;
    default:
      return false;
  }
}

// `rejected` when `s` is a clear error, kViolation (with the message kept) otherwise.
OnnxOutcome Reject(const char* stage, const Status& s, OnnxOutcome rejected) {
  if (ClearError(s)) return rejected;
  g_violation = std::string(stage) + " returned " + s.ToString() +
                "; a bad file must give InvalidArgument, Unimplemented, OutOfRange or NotFound";
  return OnnxOutcome::kViolation;
}

OnnxOutcome Violation(const std::string& what) {
  g_violation = what;
  return OnnxOutcome::kViolation;
}

// Float inputs: a pattern in [-1, 1] with zeros and both signs. int64 inputs (embedding
// ids, carried as exact floats): 0, 1, 2, valid for any table of three rows or more.
void FillInputs(graph::GraphModel& m) {
  for (size_t k = 0; k < m.num_inputs(); ++k) {
    const int64_t n = graph::NumElements(m.input_dims(k, kOnnxBatch));
    float* x = m.input(k, kOnnxBatch);
    const bool ids = m.graph().inputs[k].dtype == graph::DType::kInt64;
    for (int64_t i = 0; i < n; ++i)
      x[i] = ids ? static_cast<float>(i % 3) : static_cast<float>((i * 7) % 17 - 8) / 8.0f;
  }
}

}  // namespace

const char* OnnxOutcomeName(OnnxOutcome o) {
  switch (o) {
    case OnnxOutcome::kParseRejected:
      return "parse rejected";
    case OnnxOutcome::kCreateRejected:
      return "create rejected";
    case OnnxOutcome::kTooLarge:
      return "too large";
    case OnnxOutcome::kPlanRejected:
      return "plan rejected";
    case OnnxOutcome::kForwardRejected:
      return "forward rejected";
    case OnnxOutcome::kRan:
      return "ran";
    case OnnxOutcome::kViolation:
      return "violation";
  }
  return "?";
}

const std::string& OnnxViolationMessage() { return g_violation; }

OnnxOutcome RunOnnxInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const onnx::ReaderLimits limits = Limits();
  Result<graph::Graph> g = onnx::ParseOnnx(bytes, limits);
  if (!g.ok()) return Reject("ParseOnnx", g.status(), OnnxOutcome::kParseRejected);

  graph::GraphModelOptions options;
  options.limits = limits.graph;
  Result<std::unique_ptr<graph::GraphModel>> created =
      graph::GraphModel::Create(std::move(*g), &CpuBackend(), options);
  if (!created.ok()) {
    return Reject("GraphModel::Create", created.status(), OnnxOutcome::kCreateRejected);
  }
  graph::GraphModel& m = **created;
  if (m.num_flat() > kOnnxMaxFlat) return OnnxOutcome::kTooLarge;

  if (Status s = m.Plan(kOnnxBatch); !s.ok()) {
    return Reject("Plan", s, OnnxOutcome::kPlanRejected);
  }
  FillInputs(m);
  if (Status s = m.Forward(kOnnxBatch, /*training=*/true, /*seed=*/1); !s.ok()) {
    return Reject("Forward(training)", s, OnnxOutcome::kForwardRejected);
  }
  const int64_t ny = graph::NumElements(m.output_dims(0));
  float* dy = m.output_grad(0);
  if (ny > 0) {
    if (dy == nullptr) return Violation("output_grad(0) is null after a training Forward");
    std::fill(dy, dy + ny, 1.0f);
  }
  m.Backward();
  if (Status s = m.Forward(kOnnxBatch, /*training=*/false, /*seed=*/2); !s.ok()) {
    return Reject("Forward(eval)", s, OnnxOutcome::kForwardRejected);
  }
  return OnnxOutcome::kRan;
}

int FuzzOnnxModel(const uint8_t* data, size_t size) {
  if (RunOnnxInput(data, size) == OnnxOutcome::kViolation) {
    std::fprintf(stderr, "onnx fuzz: %s\n", g_violation.c_str());
    std::fflush(stderr);
    __builtin_trap();
  }
  return 0;
}

std::vector<uint8_t> MutateOnnx(std::span<const uint8_t> seed, Rng& rng) {
  // Bytes that are common protobuf tags and lengths, and integer edges.
  static constexpr uint8_t kEdgeBytes[] = {0x00, 0x01, 0x02, 0x08, 0x0A, 0x10, 0x12, 0x1A,
                                           0x22, 0x3A, 0x7F, 0x80, 0x81, 0xFE, 0xFF};
  std::vector<uint8_t> m(seed.begin(), seed.end());
  auto pos = [&] { return static_cast<size_t>(rng.UniformInt(m.size())); };
  const uint64_t rounds = 1 + rng.UniformInt(3);
  for (uint64_t r = 0; r < rounds; ++r) {
    switch (rng.UniformInt(7)) {
      case 0:  // bit flips
        if (m.empty()) break;
        for (uint64_t f = 1 + rng.UniformInt(4); f > 0; --f) {
          m[pos()] ^= static_cast<uint8_t>(1u << rng.UniformInt(8));
        }
        break;
      case 1:  // an edge byte
        if (!m.empty()) m[pos()] = kEdgeBytes[rng.UniformInt(std::size(kEdgeBytes))];
        break;
      case 2:  // truncation
        m.resize(rng.UniformInt(m.size() + 1));
        break;
      case 3: {  // inserted random bytes
        const size_t at = m.empty() ? 0 : pos();
        for (uint64_t k = 1 + rng.UniformInt(8); k > 0; --k) {
          m.insert(m.begin() + static_cast<ptrdiff_t>(at), static_cast<uint8_t>(rng.NextU64()));
        }
        break;
      }
      case 4: {  // a range duplicated somewhere else (repeated fields, nested messages)
        if (m.empty()) break;
        const size_t from = pos();
        const size_t len = std::min<size_t>(m.size() - from, 1 + rng.UniformInt(256));
        const std::vector<uint8_t> range(m.begin() + static_cast<ptrdiff_t>(from),
                                         m.begin() + static_cast<ptrdiff_t>(from + len));
        const size_t at = static_cast<size_t>(rng.UniformInt(m.size() + 1));
        m.insert(m.begin() + static_cast<ptrdiff_t>(at), range.begin(), range.end());
        break;
      }
      case 5: {  // a deleted range
        if (m.empty()) break;
        const size_t at = pos();
        const size_t len = std::min<size_t>(m.size() - at, 1 + rng.UniformInt(32));
        m.erase(m.begin() + static_cast<ptrdiff_t>(at),
                m.begin() + static_cast<ptrdiff_t>(at + len));
        break;
      }
      default:  // a small value: a varint dim, attribute int, length or enum
        if (!m.empty()) m[pos()] = static_cast<uint8_t>(rng.UniformInt(16));
    }
  }
  return m;
}

}  // namespace fedmesh::fuzz
