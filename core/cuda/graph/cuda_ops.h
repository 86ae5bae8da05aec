// The factories of the CUDA graph kernels, one per ONNX op type, grouped by the file that
// implements them; cuda_op_registry.cc maps op type names to them. Each takes the node's
// context and its CPU kernel (already made, so the node's attributes are valid) and wraps
// it (cuda_op_kernel.h).
// Thread-safety: pure functions.
#pragma once

#include <memory>

#include "core/graph/op_kernel.h"

namespace fedmesh::graph::cuda_ops {

using CudaKernelResult = Result<std::unique_ptr<OpKernel>>;
using CudaKernelFactory = CudaKernelResult (*)(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);

// cuda_unary.cu: one output element per input element, and Dropout.
CudaKernelResult MakeCudaRelu(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaLeakyRelu(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaSigmoid(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaTanh(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaGelu(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaErf(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaSqrt(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaNeg(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaExp(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaLog(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaIdentity(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaIsNaN(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaDropout(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
// cuda_gemm.cu: Gemm and MatMul through the backend's cuBLAS.
CudaKernelResult MakeCudaGemm(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaMatMul(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
// cuda_unary.cu too: ops whose output is the input's elements in the same order.
CudaKernelResult MakeCudaFlatten(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaReshape(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaSqueeze(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaUnsqueeze(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);

// cuda_elementwise.cu: numpy-broadcasting binary ops and Where.
CudaKernelResult MakeCudaAdd(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaSub(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaMul(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaDiv(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaPow(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaWhere(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
// cuda_softmax_reduce.cu
CudaKernelResult MakeCudaSoftmax(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaLogSoftmax(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaReduceMean(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaReduceSum(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
// cuda_shape_ops.cu: ops that move elements.
CudaKernelResult MakeCudaTranspose(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaConcat(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaGather(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaPad(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);

// cuda_conv.cu: Conv on NCHW / OIHW (stride, pads, dilation, groups).
CudaKernelResult MakeCudaConv(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
// cuda_pool.cu
CudaKernelResult MakeCudaMaxPool(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaAveragePool(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaGlobalAveragePool(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
// cuda_normalization.cu
CudaKernelResult MakeCudaBatchNormalization(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);
CudaKernelResult MakeCudaLayerNormalization(const KernelContext& ctx, std::unique_ptr<OpKernel> cpu);

}  // namespace fedmesh::graph::cuda_ops
