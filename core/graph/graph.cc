#include "core/graph/graph.h"

#include <algorithm>
#include <cstring>
#include <queue>
#include <set>
#include <unordered_map>

#include "core/sha256.h"

namespace fedmesh::graph {

const char* DTypeName(DType t) { return t == DType::kFloat32 ? "float32" : "int64"; }

int64_t NumElements(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= (x < 0 ? 1 : x);
  return n;
}

std::string DimsToString(const Dims& d) {
  std::string s = "[";
  for (size_t k = 0; k < d.size(); ++k) {
    if (k) s += ",";
    s += d[k] < 0 ? "N" : std::to_string(d[k]);
  }
  return s + "]";
}

std::string IntsToString(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); ++k) {
    if (k) s += ',';
    s += std::to_string(v[k]);
  }
  return s + "]";
}

int64_t Node::Int(const std::string& attr, int64_t fallback) const {
  auto it = attrs.find(attr);
  return it == attrs.end() ? fallback : it->second.i;
}
float Node::Float(const std::string& attr, float fallback) const {
  auto it = attrs.find(attr);
  return it == attrs.end() ? fallback : it->second.f;
}
std::string Node::String(const std::string& attr, const std::string& fallback) const {
  auto it = attrs.find(attr);
  return it == attrs.end() ? fallback : it->second.s;
}
std::vector<int64_t> Node::Ints(const std::string& attr, std::vector<int64_t> fallback) const {
  auto it = attrs.find(attr);
  return it == attrs.end() ? fallback : it->second.ints;
}
std::string Node::Label() const { return "node '" + name + "' (" + op_type + ")"; }

const Tensor* Graph::FindInitializer(const std::string& n) const {
  for (const Tensor& t : initializers)
    if (t.name == n) return &t;
  return nullptr;
}

namespace {

Status CheckDims(const Dims& d, const std::string& what, const GraphLimits& limits) {
  if (d.size() > limits.max_rank)
    return Status::InvalidArgument(what + " has rank " + std::to_string(d.size()) +
                                   "; at most " + std::to_string(limits.max_rank) +
                                   " is supported");
  int64_t n = 1;
  for (int64_t x : d) {
    if (x < -1) return Status::InvalidArgument(what + " has a negative dimension");
    if (x > 0) {
      if (n > limits.max_tensor_elements / x)
        return Status::InvalidArgument(what + " has " + DimsToString(d) +
                                       " elements, more than the limit of " +
                                       std::to_string(limits.max_tensor_elements));
      n *= x;
    }
  }
  return Status::OK();
}

}  // namespace

Status Finalize(Graph* g, const GraphLimits& limits) {
  if (g->nodes.size() > limits.max_nodes)
    return Status::InvalidArgument("the graph has " + std::to_string(g->nodes.size()) +
                                   " nodes; the limit is " + std::to_string(limits.max_nodes));
  if (g->outputs.empty()) return Status::InvalidArgument("the graph declares no output");
  // Where each value comes from: -1 graph input or initializer, else the node index.
  std::unordered_map<std::string, int> producer;
  auto define = [&](const std::string& name, int who, const std::string& what) -> Status {
    if (name.empty()) return Status::OK();
    if (!producer.emplace(name, who).second)
      return Status::InvalidArgument("value '" + name + "' is defined twice (again by " + what +
                                     ")");
    return Status::OK();
  };
  for (const ValueInfo& v : g->inputs) {
    FM_RETURN_IF_ERROR(CheckDims(v.dims, "input '" + v.name + "'", limits));
    FM_RETURN_IF_ERROR(define(v.name, -1, "a graph input"));
  }
  for (const Tensor& t : g->initializers) {
    FM_RETURN_IF_ERROR(CheckDims(t.dims, "initializer '" + t.name + "'", limits));
    for (int64_t x : t.dims)
      if (x < 0) return Status::InvalidArgument("initializer '" + t.name + "' has a dynamic dim");
    if (static_cast<int64_t>(t.numel()) != NumElements(t.dims))
      return Status::InvalidArgument("initializer '" + t.name + "' holds " +
                                     std::to_string(t.numel()) + " values for dims " +
                                     DimsToString(t.dims));
    FM_RETURN_IF_ERROR(define(t.name, -1, "an initializer"));
  }
  for (size_t k = 0; k < g->nodes.size(); ++k)
    for (const std::string& o : g->nodes[k].outputs)
      FM_RETURN_IF_ERROR(define(o, static_cast<int>(k), g->nodes[k].Label()));
  // Kahn's algorithm, stable: among ready nodes the earliest in file order goes first.
  const size_t n = g->nodes.size();
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> consumers(n);
  for (size_t k = 0; k < n; ++k) {
    std::set<int> deps;
    for (const std::string& in : g->nodes[k].inputs) {
      if (in.empty()) continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return Status::InvalidArgument(g->nodes[k].Label() + " reads '" + in +
                                       "', which no input, initializer or node defines");
      if (it->second >= 0) deps.insert(it->second);
    }
    pending[k] = static_cast<int>(deps.size());
    for (int d : deps) consumers[d].push_back(static_cast<int>(k));
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t k = 0; k < n; ++k)
    if (pending[k] == 0) ready.push(static_cast<int>(k));
  std::vector<Node> sorted;
  sorted.reserve(n);
  while (!ready.empty()) {
    int k = ready.top();
    ready.pop();
    for (int c : consumers[k])
      if (--pending[c] == 0) ready.push(c);
    sorted.push_back(std::move(g->nodes[k]));
  }
  if (sorted.size() != n) {
    for (size_t k = 0; k < n; ++k)
      if (pending[k] > 0)
        return Status::InvalidArgument("the graph has a cycle through " + g->nodes[k].Label());
  }
  g->nodes = std::move(sorted);
  for (const ValueInfo& o : g->outputs)
    if (!producer.count(o.name))
      return Status::InvalidArgument("graph output '" + o.name + "' is never produced");
  return Status::OK();
}

namespace {

// Appends length-prefixed fields so that no two graphs serialize alike.
class Canon {
 public:
  void Str(const std::string& s) {
    U64(s.size());
    out_ += s;
  }
  void U64(uint64_t v) { out_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void Dims(const graph::Dims& d) {
    U64(d.size());
    for (int64_t x : d) U64(static_cast<uint64_t>(x));
  }
  void Floats(const std::vector<float>& f) {
    U64(f.size());
    out_.append(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float));
  }
  void Ints(const std::vector<int64_t>& v) {
    U64(v.size());
    for (int64_t x : v) U64(static_cast<uint64_t>(x));
  }
  const std::string& bytes() const { return out_; }

 private:
  std::string out_;
};

bool IsArchitectureConstant(const Tensor& t) {
  return t.dtype == DType::kInt64 || t.dims.empty();
}

void CanonTensor(Canon& c, const Tensor& t, bool with_values) {
  c.U64(static_cast<uint64_t>(t.dtype));
  c.Dims(t.dims);
  c.U64(with_values ? 1 : 0);
  if (with_values) {
    c.Floats(t.f);
    c.Ints(t.i);
  }
}

}  // namespace

std::string CanonicalHash(const Graph& g) {
  Canon c;
  c.Str("fedmesh-graph-v1");
  std::unordered_map<std::string, std::string> rename;  // intermediate value -> "%k"
  for (const ValueInfo& v : g.inputs) {
    c.Str(v.name);
    c.U64(static_cast<uint64_t>(v.dtype));
    c.Dims(v.dims);
  }
  c.U64(g.initializers.size());
  for (const Tensor& t : g.initializers) {
    c.Str(t.name);
    CanonTensor(c, t, IsArchitectureConstant(t));
  }
  std::set<std::string> graph_outputs;
  for (const ValueInfo& o : g.outputs) graph_outputs.insert(o.name);
  size_t next = 0;
  auto name_of = [&](const std::string& v) -> std::string {
    auto it = rename.find(v);
    return it == rename.end() ? v : it->second;
  };
  c.U64(g.nodes.size());
  for (const Node& n : g.nodes) {
    c.Str(n.op_type);
    c.U64(n.inputs.size());
    for (const std::string& in : n.inputs) c.Str(name_of(in));
    c.U64(n.outputs.size());
    for (const std::string& o : n.outputs) {
      if (!o.empty() && !graph_outputs.count(o)) rename[o] = std::string(1, '%').append(std::to_string(next++));
      c.Str(name_of(o));
    }
    c.U64(n.attrs.size());
    for (const auto& [key, a] : n.attrs) {  // std::map: sorted by name
      c.Str(key);
      c.U64(static_cast<uint64_t>(a.kind));
      c.U64(static_cast<uint64_t>(a.i));
      c.Floats({a.f});
      c.Str(a.s);
      c.Ints(a.ints);
      c.Floats(a.floats);
      CanonTensor(c, a.t, true);
    }
  }
  for (const ValueInfo& o : g.outputs) {
    c.Str(o.name);
    c.Dims(o.dims);
  }
  return Sha256Hex(Sha256::Hash(c.bytes()));
}

}  // namespace fedmesh::graph
