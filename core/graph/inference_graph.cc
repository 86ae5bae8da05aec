#include "core/graph/inference_graph.h"

#include <set>

namespace fedmesh::graph {

Graph InferenceGraph(const GraphModel& m) {
  Graph g = m.graph();
  if (g.opset >= 13) g.opset = 17;
  for (const auto* slots : {&m.param_slots(), &m.state_slots()})
    for (const TensorSlot& s : *slots)
      for (Tensor& t : g.initializers)
        if (t.name == s.name) t.f.assign(m.params() + s.offset, m.params() + s.offset + s.size);
  for (Node& n : g.nodes) {
    if (n.op_type == "BatchNormalization") {
      n.attrs.erase("training_mode");
      n.outputs.resize(1);
    } else if (n.op_type == "Dropout") {
      n.inputs.resize(1);  // no training_mode input: identity at inference
      n.attrs.erase("ratio");
      n.outputs.resize(1);
    }
  }
  // Constant nodes that only fed training flags are now unused.
  std::set<std::string> used;
  for (const Node& n : g.nodes) used.insert(n.inputs.begin(), n.inputs.end());
  for (const ValueInfo& o : g.outputs) used.insert(o.name);
  std::vector<Node> kept;
  for (Node& n : g.nodes)
    if (n.op_type != "Constant" || used.count(n.outputs[0])) kept.push_back(std::move(n));
  g.nodes = std::move(kept);
  return g;
}

}  // namespace fedmesh::graph
