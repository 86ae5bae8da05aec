#include "vertical/assemble_model.h"

#include <map>

namespace fedmesh::vertical {
namespace {

// Copies `part`'s nodes and initializers into `g` with every value name prefixed, its input
// read from `input` and its output written as `output`.
Status Inline(const graph::Graph& part, const std::string& prefix, const std::string& input, const std::string& output,
              graph::Graph* g) {
  if (part.inputs.size() != 1 || part.outputs.size() != 1) {
    return Status::InvalidArgument("part " + prefix + " has " + std::to_string(part.inputs.size()) + " inputs and " +
                                   std::to_string(part.outputs.size()) + " outputs; a split part has one of each");
  }
  std::map<std::string, std::string> rename = {{part.inputs[0].name, input}, {part.outputs[0].name, output}};
  auto name = [&](const std::string& n) {
    if (n.empty()) return n;
    auto it = rename.find(n);
    return it != rename.end() ? it->second : prefix + n;
  };
  for (const graph::Tensor& t : part.initializers) {
    graph::Tensor c = t;
    c.name = name(t.name);
    g->initializers.push_back(std::move(c));
  }
  for (const graph::Node& n : part.nodes) {
    graph::Node c = n;
    c.name = prefix + n.name;
    for (auto& in : c.inputs) in = name(in);
    for (auto& out : c.outputs) out = name(out);
    g->nodes.push_back(std::move(c));
  }
  return Status::OK();
}

}  // namespace

Result<graph::Graph> AssembleSplitModel(const std::vector<graph::Graph>& bottoms, const graph::Graph& top,
                                        CutCombine combine) {
  if (bottoms.empty()) return Status::InvalidArgument("no bottom models to assemble");
  graph::Graph g;
  g.name = "split_model";
  int64_t total = 0;
  std::vector<std::string> outs;
  for (size_t k = 0; k < bottoms.size(); ++k) {
    const graph::Graph& b = bottoms[k];
    if (b.inputs.size() != 1 || b.outputs.size() != 1) {
      return Status::InvalidArgument("bottom " + std::to_string(k) + " has " + std::to_string(b.inputs.size()) +
                                     " inputs and " + std::to_string(b.outputs.size()) +
                                     " outputs; a split part has one of each");
    }
    if (b.inputs[0].dims.size() != 2 || b.inputs[0].dims[1] <= 0) {
      return Status::InvalidArgument("bottom " + std::to_string(k) + ": its input must be [batch, width]");
    }
    const int64_t width = b.inputs[0].dims[1];
    const std::string p = "party" + std::to_string(k) + "/";
    graph::Tensor cols;
    cols.name = p + "columns";
    cols.dtype = graph::DType::kInt64;
    cols.dims = {width};
    for (int64_t c = 0; c < width; ++c) cols.i.push_back(total + c);
    g.initializers.push_back(cols);
    graph::Node gather;
    gather.name = p + "select_columns";
    gather.op_type = "Gather";
    gather.inputs = {"x", cols.name};
    gather.outputs = {p + "x"};
    gather.attrs["axis"] = graph::Attribute::OfInt(1);
    g.nodes.push_back(gather);
    FM_RETURN_IF_ERROR(Inline(b, p, p + "x", p + "out", &g));
    outs.push_back(p + "out");
    total += width;
  }
  // The cut's width against the top's input, where the parts declare them.
  if (top.inputs.size() == 1 && top.inputs[0].dims.size() == 2 && top.inputs[0].dims[1] > 0) {
    const int64_t want = top.inputs[0].dims[1];
    int64_t total = 0;
    bool all_known = true, mismatch = false;
    std::string widths;
    for (const graph::Graph& b : bottoms) {
      const graph::Dims& d = b.outputs[0].dims;
      const bool known = d.size() == 2 && d[1] > 0;
      all_known = all_known && known;
      widths += (widths.empty() ? "" : combine == CutCombine::kSum ? ", " : " + ") + (known ? std::to_string(d[1]) : "?");
      if (known) total += d[1];
      if (known && combine == CutCombine::kSum && d[1] != want) mismatch = true;
    }
    if (combine == CutCombine::kConcat && all_known && total != want) mismatch = true;
    if (mismatch) {
      return Status::InvalidArgument("the top model takes " + std::to_string(want) + " inputs; the bottoms give " +
                                     widths + (combine == CutCombine::kSum ? " (summed: each must be the top's width)"
                                                                           : " = " + std::to_string(total)));
    }
  }
  if (combine == CutCombine::kConcat) {
    graph::Node concat;
    concat.name = "concat_cut";
    concat.op_type = "Concat";
    concat.inputs = outs;
    concat.outputs = {"cut"};
    concat.attrs["axis"] = graph::Attribute::OfInt(1);
    g.nodes.push_back(concat);
  } else {
    std::string acc = outs[0];
    for (size_t k = 1; k < outs.size(); ++k) {
      graph::Node add;
      add.name = "add_cut" + std::to_string(k);
      add.op_type = "Add";
      add.inputs = {acc, outs[k]};
      acc = k + 1 == outs.size() ? "cut" : "cut_partial" + std::to_string(k);
      add.outputs = {acc};
      g.nodes.push_back(add);
    }
    if (outs.size() == 1) {
      graph::Node id;
      id.name = "identity_cut";
      id.op_type = "Identity";
      id.inputs = {outs[0]};
      id.outputs = {"cut"};
      g.nodes.push_back(id);
    }
  }
  if (top.outputs.size() != 1) return Status::InvalidArgument("the top model has other than one output");
  const std::string out_name = top.outputs[0].name;
  FM_RETURN_IF_ERROR(Inline(top, "top/", "cut", out_name, &g));
  g.inputs = {{"x", graph::DType::kFloat32, {-1, total}}};
  graph::ValueInfo out = top.outputs[0];
  g.outputs = {out};
  g.opset = top.opset;
  FM_RETURN_IF_ERROR(graph::Finalize(&g));
  return g;
}

}  // namespace fedmesh::vertical
