#include "core/graph/input_normalization.h"

#include <cmath>
#include <string>

namespace fedmesh::graph {
namespace {

std::string Name(std::string_view what) { return std::string(kInputNormalizationPrefix) + std::string(what); }

Node ConstantNode(const std::string& name, std::span<const double> values, const Dims& dims) {
  Node n;
  n.name = name;
  n.op_type = "Constant";
  n.outputs = {name};
  Attribute a;
  a.kind = Attribute::Kind::kTensor;
  a.t.name = name;
  a.t.dtype = DType::kFloat32;
  a.t.dims = dims;
  for (double v : values) a.t.f.push_back(static_cast<float>(v));
  n.attrs["value"] = std::move(a);
  return n;
}

}  // namespace

bool HasInputNormalization(const Graph& g) {
  for (const Node& n : g.nodes)
    if (n.name.rfind(kInputNormalizationPrefix, 0) == 0) return true;
  return false;
}

Result<Graph> AddInputNormalization(const Graph& g, std::span<const double> mean,
                                    std::span<const double> stddev) {
  if (HasInputNormalization(g)) {
    return Status::InvalidArgument("the model already normalizes its input (" +
                                   std::string(kInputNormalizationPrefix) + "* nodes)");
  }
  const Dims* in = g.inputs.empty() ? nullptr : &g.inputs[0].dims;
  if (in == nullptr || g.inputs[0].dtype != DType::kFloat32 || (in->size() != 2 && in->size() != 4)) {
    return Status::InvalidArgument(
        "federated normalization needs a model whose input is a float [batch, features] table "
        "or [batch, channels, height, width] images; this one's is " +
        (in == nullptr ? std::string("missing") : DimsToString(*in)));
  }
  // A table: one constant per feature. Images: one per channel, broadcast over the pixels.
  const bool image = in->size() == 4;
  const int64_t features = (*in)[1];
  const Dims constant_dims = image ? Dims{features, 1, 1} : Dims{features};
  if (mean.size() != stddev.size() || static_cast<int64_t>(mean.size()) != features) {
    return Status::InvalidArgument("the model's input has " + std::to_string(features) +
                                   (image ? " channels" : " features") + "; the statistics have " +
                                   std::to_string(mean.size()));
  }
  std::vector<double> scale(stddev.begin(), stddev.end());
  for (size_t j = 0; j < scale.size(); ++j) {
    if (!std::isfinite(mean[j]) || !std::isfinite(scale[j]) || scale[j] < 0) {
      return Status::InvalidArgument("normalization constant " + std::to_string(j) +
                                     " is not finite (or a negative stddev)");
    }
    if (scale[j] == 0) scale[j] = 1.0;  // a constant feature: centred, not scaled
  }
  Graph out = g;
  const std::string x = g.inputs[0].name;
  const std::string normalized = Name("output");
  for (Node& n : out.nodes)
    for (std::string& in : n.inputs)
      if (in == x) in = normalized;
  for (ValueInfo& o : out.outputs)
    if (o.name == x) {
      return Status::InvalidArgument("the model's input is also its output; nothing to normalize");
    }
  // A missing cell (NaN) becomes the mean first, so it scales to 0: what a site that
  // imputes with the federation's means ([data] missing = "impute_mean") feeds the model.
  Node isnan;
  isnan.name = Name("isnan");
  isnan.op_type = "IsNaN";
  isnan.inputs = {x};
  isnan.outputs = {Name("missing")};
  Node where;
  where.name = Name("impute");
  where.op_type = "Where";
  where.inputs = {Name("missing"), Name("mean"), x};
  where.outputs = {Name("filled")};
  Node sub;
  sub.name = Name("sub");
  sub.op_type = "Sub";
  sub.inputs = {Name("filled"), Name("mean")};
  sub.outputs = {Name("centred")};
  Node div;
  div.name = Name("div");
  div.op_type = "Div";
  div.inputs = {Name("centred"), Name("std")};
  div.outputs = {normalized};
  std::vector<Node> nodes = {ConstantNode(Name("mean"), mean, constant_dims),
                             ConstantNode(Name("std"), scale, constant_dims),
                             std::move(isnan), std::move(where), std::move(sub), std::move(div)};
  nodes.insert(nodes.end(), std::make_move_iterator(out.nodes.begin()),
               std::make_move_iterator(out.nodes.end()));
  out.nodes = std::move(nodes);
  FM_RETURN_IF_ERROR(Finalize(&out));
  return out;
}

Result<Graph> RemoveInputNormalization(const Graph& g) {
  Graph out = g;
  if (!HasInputNormalization(g)) return out;
  const std::string x = g.inputs.empty() ? "" : g.inputs[0].name;
  std::vector<Node> kept;
  for (Node& n : out.nodes) {
    if (n.name.rfind(kInputNormalizationPrefix, 0) == 0) continue;
    for (std::string& in : n.inputs)
      if (in == Name("output")) in = x;
    kept.push_back(std::move(n));
  }
  out.nodes = std::move(kept);
  FM_RETURN_IF_ERROR(Finalize(&out));
  return out;
}

}  // namespace fedmesh::graph
