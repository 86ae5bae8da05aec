// The whole model of a split job as one graph (docs/vertical.md, "Assembling"): its input is
// a joined row, every party's columns side by side (the label party's first, then each
// feature party's in `peers` order); a Gather on axis 1 hands each bottom model its own
// columns, a Concat joins their outputs (with combine sum: Add nodes add them), and the top
// model runs on that. Its outputs are the
// parts' outputs run in turn. Built only with every party's consent (each feature party sends
// its trained part when its [split] share_part is set).
// Thread-safety: pure function.
#pragma once

#include <vector>

#include "core/graph/graph.h"
#include "core/status.h"
#include "vertical/cut_combine.h"

namespace fedmesh::vertical {

// `bottoms`: every party's trained bottom (inference form), the label party's first, each
// with one input [batch, width]; `top` over their concatenated (or summed) outputs. InvalidArgument
// when a part has other than one input and one output; the graph's own checks (Finalize)
// otherwise.
Result<graph::Graph> AssembleSplitModel(const std::vector<graph::Graph>& bottoms, const graph::Graph& top,
                                        CutCombine combine = CutCombine::kConcat);

}  // namespace fedmesh::vertical
