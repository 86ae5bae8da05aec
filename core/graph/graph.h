// Graph: a model as a DAG of ops over named tensors, in ONNX's vocabulary (op types,
// attributes, initializers) but independent of any file format. The ONNX reader and
// writer (core/onnx/) convert to and from it; the built-in models are built as graphs in
// code; GraphModel (core/graph/graph_model.h) runs it. Dimensions are int64 with -1 for a
// dimension fixed only at run time (the batch).
// Thread-safety: plain values; a const Graph may be read from many threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace fedmesh::graph {

enum class DType { kFloat32, kInt64 };
const char* DTypeName(DType t);

using Dims = std::vector<int64_t>;
// Product of the dims; -1 dims count as 1. 0 for a zero-sized dim.
int64_t NumElements(const Dims& d);
std::string DimsToString(const Dims& d);
// "[1,-2,3]": an int list as written (attributes such as pads), negatives kept.
std::string IntsToString(const std::vector<int64_t>& v);

// A constant tensor: an initializer, a Constant node's value, or a tensor attribute.
struct Tensor {
  std::string name;
  DType dtype = DType::kFloat32;
  Dims dims;
  std::vector<float> f;    // float32 values, when dtype is kFloat32
  std::vector<int64_t> i;  // int64 values, when dtype is kInt64
  size_t numel() const { return dtype == DType::kFloat32 ? f.size() : i.size(); }
};

struct Attribute {
  enum class Kind { kInt, kFloat, kString, kInts, kFloats, kTensor };
  Kind kind = Kind::kInt;
  int64_t i = 0;
  float f = 0.0f;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  Tensor t;

  // Attributes of one kind, for graphs built in code (built-in models, tests).
  static Attribute OfInt(int64_t v) {
    Attribute a;
    a.kind = Kind::kInt;
    a.i = v;
    return a;
  }
  static Attribute OfInts(std::vector<int64_t> v) {
    Attribute a;
    a.kind = Kind::kInts;
    a.ints = std::move(v);
    return a;
  }
  static Attribute OfFloat(float v) {
    Attribute a;
    a.kind = Kind::kFloat;
    a.f = v;
    return a;
  }
  static Attribute OfString(std::string v) {
    Attribute a;
    a.kind = Kind::kString;
    a.s = std::move(v);
    return a;
  }
};

struct Node {
  std::string name;     // unique in the graph (the reader names unnamed nodes)
  std::string op_type;  // ONNX op type, e.g. "Conv"
  std::vector<std::string> inputs;   // "" marks an absent optional input
  std::vector<std::string> outputs;  // "" marks an output nobody wants
  std::map<std::string, Attribute> attrs;

  bool Has(const std::string& attr) const { return attrs.count(attr) != 0; }
  int64_t Int(const std::string& attr, int64_t fallback) const;
  float Float(const std::string& attr, float fallback) const;
  std::string String(const std::string& attr, const std::string& fallback) const;
  std::vector<int64_t> Ints(const std::string& attr, std::vector<int64_t> fallback) const;
  // "node 'name' (OpType)", for error messages.
  std::string Label() const;
};

struct ValueInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  Dims dims;  // -1 where dynamic
};

struct Graph {
  std::string name = "model";
  int64_t opset = 17;
  std::vector<ValueInfo> inputs;   // run-time inputs (initializers are not listed here)
  std::vector<ValueInfo> outputs;  // outputs()[0] is the one losses and metrics read
  std::vector<Node> nodes;         // in topological order once Finalize() succeeded
  std::vector<Tensor> initializers;

  const Tensor* FindInitializer(const std::string& name) const;
};

// Limits a graph must respect before anything allocates for it (defaults fit any model
// fedmesh targets; a file claiming more is refused, not trusted).
struct GraphLimits {
  size_t max_nodes = 100000;
  size_t max_rank = 8;
  int64_t max_tensor_elements = int64_t{1} << 30;  // one tensor (4 GiB of float32)
};

// Sorts nodes topologically and checks the graph is well formed: unique value names,
// every consumed value defined exactly once (input, initializer or node output), no
// cycle, every output produced, ranks and sizes within `limits`. Fails naming the node.
Status Finalize(Graph* g, const GraphLimits& limits = {});

// SHA-256 (hex) of the graph's architecture: op types, attributes, connectivity, inputs
// and outputs with their dims, initializer names, dtypes and dims, and the values of
// constants that are not parameters (int64 tensors and rank-0 floats). Trained weights do
// not enter, so every round of a federation has the same hash. Intermediate value names
// are replaced by their position, so re-exporting the same module gives the same hash.
// REQUIRES: Finalize(g) succeeded.
std::string CanonicalHash(const Graph& g);

}  // namespace fedmesh::graph
