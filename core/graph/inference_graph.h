// The trained model as a graph to export: the graph a GraphModel runs, with its current
// parameters and state as initializers and every training-only construct in inference
// form (BatchNormalization on running statistics with one output, Dropout as identity),
// at opset 17 when the source was 13 or later. The batch dimension stays dynamic.
// Thread-safety: pure function of a model no other thread is changing.
#pragma once

#include "core/graph/graph.h"
#include "core/graph/graph_model.h"

namespace fedmesh::graph {

Graph InferenceGraph(const GraphModel& m);

}  // namespace fedmesh::graph
