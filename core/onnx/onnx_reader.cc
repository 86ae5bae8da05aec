#include "core/onnx/onnx_reader.h"

#include <google/protobuf/io/coded_stream.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "onnx/onnx_pb.h"

namespace fedmesh::onnx {
namespace {

using graph::DType;
using graph::Tensor;

Status Bad(const std::string& m) { return Status::InvalidArgument(m); }

Result<DType> TensorDType(int elem_type, const std::string& what) {
  switch (elem_type) {
    case ::onnx::TensorProto::FLOAT: return DType::kFloat32;
    case ::onnx::TensorProto::INT64:
    case ::onnx::TensorProto::INT32:
    case ::onnx::TensorProto::BOOL: return DType::kInt64;
    default:
      return Bad(what + " has ONNX element type " + std::to_string(elem_type) +
                 "; supported: float32 (1), int64 (7), int32 (6), bool (9)");
  }
}

Result<Tensor> ConvertTensor(const ::onnx::TensorProto& tp, const std::string& what,
                             const ReaderLimits& limits, int64_t* absent_budget = nullptr) {
  Tensor t;
  t.name = tp.name();
  if (tp.data_location() == ::onnx::TensorProto::EXTERNAL || tp.external_data_size() > 0)
    return Bad(what + " keeps its data in an external file; save the model with the weights "
                      "inside (torch.onnx.export does unless the model is over 2 GiB)");
  FM_ASSIGN_OR_RETURN(t.dtype, TensorDType(tp.data_type(), what));
  if (static_cast<size_t>(tp.dims_size()) > limits.graph.max_rank)
    return Bad(what + " has rank " + std::to_string(tp.dims_size()));
  int64_t n = 1;
  for (int64_t d : tp.dims()) {
    if (d < 0) return Bad(what + " has a negative dimension");
    if (d > 0 && n > limits.graph.max_tensor_elements / d)
      return Bad(what + " claims more than " + std::to_string(limits.graph.max_tensor_elements) +
                 " elements");
    n *= d;
    t.dims.push_back(d);
  }
  const int type = tp.data_type();
  const size_t width = type == ::onnx::TensorProto::FLOAT || type == ::onnx::TensorProto::INT32
                           ? 4
                           : type == ::onnx::TensorProto::INT64 ? 8 : 1;
  size_t have = 0;
  if (tp.has_raw_data()) {
    have = tp.raw_data().size() / width;
    if (tp.raw_data().size() % width != 0 || have != static_cast<size_t>(n))
      return Bad(what + " claims " + std::to_string(n) + " elements " + graph::DimsToString(t.dims) +
                 " but holds " + std::to_string(tp.raw_data().size()) + " bytes of data");
    const char* raw = tp.raw_data().data();
    if (type == ::onnx::TensorProto::FLOAT) {
      t.f.resize(n);
      if (n > 0) std::memcpy(t.f.data(), raw, n * 4);  // little-endian, as ONNX specifies
    } else {
      t.i.resize(n);
      for (int64_t k = 0; k < n; ++k) {
        if (type == ::onnx::TensorProto::INT64) {
          std::memcpy(&t.i[k], raw + 8 * k, 8);
        } else if (type == ::onnx::TensorProto::INT32) {
          int32_t v;
          std::memcpy(&v, raw + 4 * k, 4);
          t.i[k] = v;
        } else {
          t.i[k] = raw[k] != 0;
        }
      }
    }
    return t;
  }
  if (absent_budget && type == ::onnx::TensorProto::FLOAT && !t.dims.empty() &&
      tp.float_data_size() == 0) {
    if (n > *absent_budget)
      return Bad(what + ": the architecture's weights exceed " +
                 std::to_string(limits.max_absent_elements) + " values");
    *absent_budget -= n;
    t.f.assign(static_cast<size_t>(n), 0.0f);
    return t;
  }
  if (type == ::onnx::TensorProto::FLOAT) {
    have = tp.float_data_size();
    t.f.assign(tp.float_data().begin(), tp.float_data().end());
  } else if (type == ::onnx::TensorProto::INT64) {
    have = tp.int64_data_size();
    t.i.assign(tp.int64_data().begin(), tp.int64_data().end());
  } else {
    have = tp.int32_data_size();
    t.i.assign(tp.int32_data().begin(), tp.int32_data().end());
  }
  if (have != static_cast<size_t>(n))
    return Bad(what + " claims " + std::to_string(n) + " elements " + graph::DimsToString(t.dims) +
               " but holds " + std::to_string(have));
  return t;
}

Result<graph::ValueInfo> ConvertValueInfo(const ::onnx::ValueInfoProto& vi, const std::string& what,
                                          const ReaderLimits& limits) {
  graph::ValueInfo v;
  v.name = vi.name();
  if (!vi.type().has_tensor_type()) return Bad(what + " '" + v.name + "' is not a tensor");
  const auto& tt = vi.type().tensor_type();
  FM_ASSIGN_OR_RETURN(v.dtype, TensorDType(tt.elem_type(), what + " '" + v.name + "'"));
  if (!tt.has_shape()) return Bad(what + " '" + v.name + "' declares no shape");
  if (static_cast<size_t>(tt.shape().dim_size()) > limits.graph.max_rank)
    return Bad(what + " '" + v.name + "' has rank " + std::to_string(tt.shape().dim_size()));
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0) return Bad(what + " '" + v.name + "' has a negative dimension");
      v.dims.push_back(d.dim_value());
    } else {
      v.dims.push_back(-1);
    }
  }
  return v;
}

Result<graph::Attribute> ConvertAttribute(const ::onnx::AttributeProto& ap, const std::string& what,
                                          const ReaderLimits& limits) {
  graph::Attribute a;
  using A = ::onnx::AttributeProto;
  switch (ap.type()) {
    case A::INT: a.kind = graph::Attribute::Kind::kInt; a.i = ap.i(); break;
    case A::FLOAT: a.kind = graph::Attribute::Kind::kFloat; a.f = ap.f(); break;
    case A::STRING: a.kind = graph::Attribute::Kind::kString; a.s = ap.s(); break;
    case A::INTS:
      a.kind = graph::Attribute::Kind::kInts;
      a.ints.assign(ap.ints().begin(), ap.ints().end());
      break;
    case A::FLOATS:
      a.kind = graph::Attribute::Kind::kFloats;
      a.floats.assign(ap.floats().begin(), ap.floats().end());
      break;
    case A::TENSOR: {
      a.kind = graph::Attribute::Kind::kTensor;
      FM_ASSIGN_OR_RETURN(a.t, ConvertTensor(ap.t(), what + " attribute '" + ap.name() + "'", limits));
      break;
    }
    default:
      return Bad(what + ": attribute '" + ap.name() + "' has type " + std::to_string(ap.type()) +
                 ", which fedmesh does not read (int, float, string, ints, floats, tensor)");
  }
  return a;
}

}  // namespace

Result<graph::Graph> ParseOnnx(std::string_view bytes, const ReaderLimits& limits) {
  if (bytes.size() > limits.max_file_bytes)
    return Bad("the model is " + std::to_string(bytes.size()) + " bytes; the limit is " +
               std::to_string(limits.max_file_bytes));
  ::onnx::ModelProto model;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetTotalBytesLimit(static_cast<int>(std::min<size_t>(bytes.size() + 1, INT32_MAX)));
  in.SetRecursionLimit(64);
  if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    return Bad("not a valid ONNX model (the protobuf does not parse: truncated or not ONNX)");
  if (!model.has_graph()) return Bad("the ONNX model has no graph");
  graph::Graph g;
  g.opset = -1;
  for (const auto& os : model.opset_import()) {
    if (os.domain().empty() || os.domain() == "ai.onnx") g.opset = os.version();
  }
  if (g.opset < 0) return Bad("the ONNX model imports no default-domain opset");
  if (g.opset < limits.min_opset || g.opset > limits.max_opset)
    return Bad("the ONNX model uses opset " + std::to_string(g.opset) + "; fedmesh reads opsets " +
               std::to_string(limits.min_opset) + " to " + std::to_string(limits.max_opset) +
               " (torch.onnx.export(..., opset_version=17))");
  const ::onnx::GraphProto& gp = model.graph();
  g.name = gp.name().empty() ? "model" : gp.name();
  if (static_cast<size_t>(gp.node_size()) > limits.graph.max_nodes)
    return Bad("the graph has " + std::to_string(gp.node_size()) + " nodes; the limit is " +
               std::to_string(limits.graph.max_nodes));
  std::set<std::string> init_names;
  int64_t absent_budget = limits.max_absent_elements;
  for (const auto& tp : gp.initializer()) {
    FM_ASSIGN_OR_RETURN(Tensor t, ConvertTensor(tp, "initializer '" + tp.name() + "'", limits,
                                                limits.absent_weights_as_zeros ? &absent_budget
                                                                               : nullptr));
    init_names.insert(t.name);
    g.initializers.push_back(std::move(t));
  }
  if (gp.sparse_initializer_size() > 0) return Bad("sparse initializers are not supported");
  for (const auto& vi : gp.input()) {
    if (init_names.count(vi.name())) continue;  // keep_initializers_as_inputs exports
    FM_ASSIGN_OR_RETURN(graph::ValueInfo v, ConvertValueInfo(vi, "graph input", limits));
    if (!v.dims.empty()) v.dims[0] = -1;
    g.inputs.push_back(std::move(v));
  }
  if (g.inputs.empty()) return Bad("the graph has no input besides its initializers");
  for (const auto& vi : gp.output()) {
    FM_ASSIGN_OR_RETURN(graph::ValueInfo v, ConvertValueInfo(vi, "graph output", limits));
    if (!v.dims.empty()) v.dims[0] = -1;
    g.outputs.push_back(std::move(v));
  }
  std::set<std::string> names;
  for (int k = 0; k < gp.node_size(); ++k) {
    const auto& np = gp.node(k);
    graph::Node n;
    n.op_type = np.op_type();
    n.name = np.name().empty() ? np.op_type() + "_" + std::to_string(k) : np.name();
    if (!names.insert(n.name).second) n.name += "_" + std::to_string(k);
    if (!np.domain().empty() && np.domain() != "ai.onnx")
      return Bad(n.Label() + " is in op domain '" + np.domain() +
                 "'; fedmesh supports the default ONNX domain only");
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& ap : np.attribute()) {
      FM_ASSIGN_OR_RETURN(graph::Attribute a, ConvertAttribute(ap, n.Label(), limits));
      n.attrs[ap.name()] = std::move(a);
    }
    g.nodes.push_back(std::move(n));
  }
  FM_RETURN_IF_ERROR(graph::Finalize(&g, limits.graph));
  return g;
}

Result<graph::Graph> ReadOnnxFile(const std::string& path, const ReaderLimits& limits) {
  // An ifstream opens a directory on Linux and reports its size as 2^63 - 1.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument(path + ": is a directory, not an ONNX file");
  }
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return Status::NotFound(path + ": cannot open the ONNX file");
  const std::streamoff size = f.tellg();
  if (size < 0) return Status::IOError(path + ": cannot read the ONNX file");
  if (static_cast<size_t>(size) > limits.max_file_bytes)
    return Bad(path + ": the ONNX file is " + std::to_string(size) + " bytes; the limit is " +
               std::to_string(limits.max_file_bytes));
  std::string bytes(static_cast<size_t>(size), '\0');
  f.seekg(0);
  if (!f.read(bytes.data(), size)) return Status::IOError(path + ": cannot read the ONNX file");
  auto g = ParseOnnx(bytes, limits);
  if (!g.ok()) return g.status().WithContext(path);
  return g;
}

Result<graph::Tensor> ReadOnnxTensorFile(const std::string& path, const ReaderLimits& limits) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument(path + ": is a directory, not an ONNX tensor file");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::NotFound(path + ": cannot open the tensor file");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  if (bytes.size() > limits.max_file_bytes) return Bad(path + ": the tensor file is too large");
  ::onnx::TensorProto tp;
  if (!tp.ParseFromString(bytes)) return Bad(path + ": not a serialized ONNX TensorProto");
  return ConvertTensor(tp, path, limits);
}

}  // namespace fedmesh::onnx
