#include "core/onnx/onnx_writer.h"

#include <cstdio>
#include <cstring>
#include <fstream>

#include "onnx/onnx_pb.h"

namespace fedmesh::onnx {
namespace {

void FillTensor(const graph::Tensor& t, ::onnx::TensorProto* tp) {
  tp->set_name(t.name);
  for (int64_t d : t.dims) tp->add_dims(d);
  if (t.dtype == graph::DType::kFloat32) {
    tp->set_data_type(::onnx::TensorProto::FLOAT);
    // No data field at all for an architecture's absent weights (SerializeArchitecture).
    if (!t.f.empty() || t.dims.empty())
      tp->set_raw_data(std::string(reinterpret_cast<const char*>(t.f.data()), t.f.size() * 4));
  } else {
    tp->set_data_type(::onnx::TensorProto::INT64);
    tp->set_raw_data(std::string(reinterpret_cast<const char*>(t.i.data()), t.i.size() * 8));
  }
}

void FillValueInfo(const graph::ValueInfo& v, ::onnx::ValueInfoProto* vi) {
  vi->set_name(v.name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(v.dtype == graph::DType::kFloat32 ? ::onnx::TensorProto::FLOAT
                                                      : ::onnx::TensorProto::INT64);
  auto* shape = tt->mutable_shape();
  for (int64_t d : v.dims) {
    auto* dim = shape->add_dim();
    if (d < 0) {
      dim->set_dim_param("N");
    } else {
      dim->set_dim_value(d);
    }
  }
}

}  // namespace

Result<std::string> SerializeOnnx(const graph::Graph& g) {
  ::onnx::ModelProto model;
  model.set_ir_version(8);  // ONNX 1.10+, what opset 15-17 exports carry
  model.set_producer_name("fedmesh");
  model.set_producer_version("0.1.0");
  auto* os = model.add_opset_import();
  os->set_domain("");
  os->set_version(g.opset);
  ::onnx::GraphProto* gp = model.mutable_graph();
  gp->set_name(g.name);
  for (const graph::ValueInfo& v : g.inputs) FillValueInfo(v, gp->add_input());
  for (const graph::ValueInfo& v : g.outputs) FillValueInfo(v, gp->add_output());
  for (const graph::Tensor& t : g.initializers) FillTensor(t, gp->add_initializer());
  for (const graph::Node& n : g.nodes) {
    auto* np = gp->add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    for (const std::string& in : n.inputs) np->add_input(in);
    for (const std::string& out : n.outputs) np->add_output(out);
    for (const auto& [key, a] : n.attrs) {
      auto* ap = np->add_attribute();
      ap->set_name(key);
      using K = graph::Attribute::Kind;
      switch (a.kind) {
        case K::kInt: ap->set_type(::onnx::AttributeProto::INT); ap->set_i(a.i); break;
        case K::kFloat: ap->set_type(::onnx::AttributeProto::FLOAT); ap->set_f(a.f); break;
        case K::kString: ap->set_type(::onnx::AttributeProto::STRING); ap->set_s(a.s); break;
        case K::kInts:
          ap->set_type(::onnx::AttributeProto::INTS);
          for (int64_t x : a.ints) ap->add_ints(x);
          break;
        case K::kFloats:
          ap->set_type(::onnx::AttributeProto::FLOATS);
          for (float x : a.floats) ap->add_floats(x);
          break;
        case K::kTensor:
          ap->set_type(::onnx::AttributeProto::TENSOR);
          FillTensor(a.t, ap->mutable_t());
          break;
      }
    }
  }
  std::string out;
  if (model.ByteSizeLong() > static_cast<size_t>(INT32_MAX) || !model.SerializeToString(&out))
    return Status::InvalidArgument("the model does not fit in one ONNX file (2 GiB)");
  return out;
}

Result<std::string> SerializeArchitecture(const graph::Graph& g) {
  graph::Graph a = g;
  for (graph::Tensor& t : a.initializers)
    if (t.dtype == graph::DType::kFloat32 && !t.dims.empty()) t.f.clear();
  return SerializeOnnx(a);
}

Status WriteOnnxFile(const graph::Graph& g, const std::string& path) {
  FM_ASSIGN_OR_RETURN(std::string bytes, SerializeOnnx(g));
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f || !f.write(bytes.data(), static_cast<std::streamsize>(bytes.size())))
      return Status::IOError(path + ": cannot write the ONNX file");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return Status::IOError(path + ": cannot move the written file into place");
  return Status::OK();
}

}  // namespace fedmesh::onnx
