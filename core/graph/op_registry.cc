// The table from ONNX op type to kernel factory. Ops are in the default ONNX domain;
// the reader refuses other domains before it gets here.
#include <algorithm>
#include <map>

#include "core/graph/op_kernel.h"
#include "core/graph/ops/ops.h"

namespace fedmesh::graph {
namespace {

const std::map<std::string, KernelFactory>& Table() {
  static const auto* table = new std::map<std::string, KernelFactory>{
      {"Add", ops::MakeAdd},
      {"AveragePool", ops::MakeAveragePool},
      {"BatchNormalization", ops::MakeBatchNormalization},
      {"Concat", ops::MakeConcat},
      {"Conv", ops::MakeConv},
      {"Div", ops::MakeDiv},
      {"Dropout", ops::MakeDropout},
      {"Erf", ops::MakeErf},
      {"Exp", ops::MakeExp},
      {"Flatten", ops::MakeFlatten},
      {"Gather", ops::MakeGather},
      {"Gelu", ops::MakeGelu},
      {"Gemm", ops::MakeGemm},
      {"GlobalAveragePool", ops::MakeGlobalAveragePool},
      {"Identity", ops::MakeIdentity},
      {"IsNaN", ops::MakeIsNaN},
      {"LayerNormalization", ops::MakeLayerNormalization},
      {"LeakyRelu", ops::MakeLeakyRelu},
      {"Log", ops::MakeLog},
      {"LogSoftmax", ops::MakeLogSoftmax},
      {"MatMul", ops::MakeMatMul},
      {"MaxPool", ops::MakeMaxPool},
      {"Mul", ops::MakeMul},
      {"Neg", ops::MakeNeg},
      {"Pad", ops::MakePad},
      {"Pow", ops::MakePow},
      {"ReduceMean", ops::MakeReduceMean},
      {"ReduceSum", ops::MakeReduceSum},
      {"Relu", ops::MakeRelu},
      {"Reshape", ops::MakeReshape},
      {"Sigmoid", ops::MakeSigmoid},
      {"Softmax", ops::MakeSoftmax},
      {"Sqrt", ops::MakeSqrt},
      {"Squeeze", ops::MakeSqueeze},
      {"Sub", ops::MakeSub},
      {"Tanh", ops::MakeTanh},
      {"Transpose", ops::MakeTranspose},
      {"Unsqueeze", ops::MakeUnsqueeze},
      {"Where", ops::MakeWhere},
  };
  return *table;
}

}  // namespace

std::vector<std::string> SupportedOps() {
  std::vector<std::string> names;
  for (const auto& [name, f] : Table()) names.push_back(name);
  names.push_back("Constant");  // folded at load, no kernel
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::unique_ptr<OpKernel>> MakeKernel(const KernelContext& ctx) {
  auto it = Table().find(ctx.node->op_type);
  if (it == Table().end()) {
    std::string list;
    for (const std::string& n : SupportedOps()) list += (list.empty() ? "" : ", ") + n;
    return Status::Unimplemented(ctx.node->Label() + ": op type '" + ctx.node->op_type +
                                 "' is not supported. Supported ops: " + list);
  }
  return it->second(ctx);
}

}  // namespace fedmesh::graph
