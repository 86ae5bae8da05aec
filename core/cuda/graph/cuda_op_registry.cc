// The table from ONNX op type to CUDA kernel factory. An op with a CPU kernel but no CUDA
// one is refused at load, naming the node and the ops the GPU runs.
#include <algorithm>
#include <map>
#include <string>

#include "core/cuda/graph/cuda_ops.h"
#include "core/graph/op_kernel.h"

namespace fedmesh::graph {
namespace {

using cuda_ops::CudaKernelFactory;

const std::map<std::string, CudaKernelFactory>& CudaTable() {
  static const auto* table = new std::map<std::string, CudaKernelFactory>{
      {"Add", cuda_ops::MakeCudaAdd},
      {"AveragePool", cuda_ops::MakeCudaAveragePool},
      {"BatchNormalization", cuda_ops::MakeCudaBatchNormalization},
      {"Concat", cuda_ops::MakeCudaConcat},
      {"Conv", cuda_ops::MakeCudaConv},
      {"Div", cuda_ops::MakeCudaDiv},
      {"Dropout", cuda_ops::MakeCudaDropout},
      {"Erf", cuda_ops::MakeCudaErf},
      {"Exp", cuda_ops::MakeCudaExp},
      {"Flatten", cuda_ops::MakeCudaFlatten},
      {"Gather", cuda_ops::MakeCudaGather},
      {"Gelu", cuda_ops::MakeCudaGelu},
      {"Gemm", cuda_ops::MakeCudaGemm},
      {"GlobalAveragePool", cuda_ops::MakeCudaGlobalAveragePool},
      {"Identity", cuda_ops::MakeCudaIdentity},
      {"IsNaN", cuda_ops::MakeCudaIsNaN},
      {"LayerNormalization", cuda_ops::MakeCudaLayerNormalization},
      {"LeakyRelu", cuda_ops::MakeCudaLeakyRelu},
      {"Log", cuda_ops::MakeCudaLog},
      {"LogSoftmax", cuda_ops::MakeCudaLogSoftmax},
      {"MatMul", cuda_ops::MakeCudaMatMul},
      {"MaxPool", cuda_ops::MakeCudaMaxPool},
      {"Mul", cuda_ops::MakeCudaMul},
      {"Neg", cuda_ops::MakeCudaNeg},
      {"Pad", cuda_ops::MakeCudaPad},
      {"Pow", cuda_ops::MakeCudaPow},
      {"ReduceMean", cuda_ops::MakeCudaReduceMean},
      {"ReduceSum", cuda_ops::MakeCudaReduceSum},
      {"Relu", cuda_ops::MakeCudaRelu},
      {"Reshape", cuda_ops::MakeCudaReshape},
      {"Sigmoid", cuda_ops::MakeCudaSigmoid},
      {"Softmax", cuda_ops::MakeCudaSoftmax},
      {"Sqrt", cuda_ops::MakeCudaSqrt},
      {"Squeeze", cuda_ops::MakeCudaSqueeze},
      {"Sub", cuda_ops::MakeCudaSub},
      {"Tanh", cuda_ops::MakeCudaTanh},
      {"Transpose", cuda_ops::MakeCudaTranspose},
      {"Unsqueeze", cuda_ops::MakeCudaUnsqueeze},
      {"Where", cuda_ops::MakeCudaWhere},
  };
  return *table;
}

}  // namespace

std::vector<std::string> CudaSupportedOps() {
  std::vector<std::string> names;
  for (const auto& [name, f] : CudaTable()) names.push_back(name);
  names.push_back("Constant");  // folded at load, no kernel
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::unique_ptr<OpKernel>> MakeCudaKernel(const KernelContext& ctx) {
  FM_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> cpu, MakeKernel(ctx));
  auto it = CudaTable().find(ctx.node->op_type);
  if (it == CudaTable().end()) {
    std::string list;
    for (const std::string& n : CudaSupportedOps()) list += (list.empty() ? "" : ", ") + n;
    return Status::Unimplemented(ctx.node->Label() + ": op type '" + ctx.node->op_type +
                                 "' has no CUDA kernel yet (train this model with device = cpu). "
                                 "Ops on CUDA: " + list);
  }
  return it->second(ctx, std::move(cpu));
}

}  // namespace fedmesh::graph
