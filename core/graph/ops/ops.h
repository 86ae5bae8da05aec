// The factories of every op kernel, one per ONNX op type, grouped by the file that
// implements them; op_registry.cc maps op type names to them.
// Thread-safety: pure functions.
#pragma once

#include <memory>

#include "core/graph/op_kernel.h"

namespace fedmesh::graph::ops {

using KernelResult = Result<std::unique_ptr<OpKernel>>;

// elementwise.cc: numpy-broadcasting binary ops.
KernelResult MakeAdd(const KernelContext& ctx);
KernelResult MakeWhere(const KernelContext& ctx);
KernelResult MakeSub(const KernelContext& ctx);
KernelResult MakeMul(const KernelContext& ctx);
KernelResult MakeDiv(const KernelContext& ctx);
KernelResult MakePow(const KernelContext& ctx);
// unary.cc: one output element per input element.
KernelResult MakeRelu(const KernelContext& ctx);
KernelResult MakeLeakyRelu(const KernelContext& ctx);
KernelResult MakeSigmoid(const KernelContext& ctx);
KernelResult MakeTanh(const KernelContext& ctx);
KernelResult MakeGelu(const KernelContext& ctx);
KernelResult MakeErf(const KernelContext& ctx);
KernelResult MakeSqrt(const KernelContext& ctx);
KernelResult MakeNeg(const KernelContext& ctx);
KernelResult MakeExp(const KernelContext& ctx);
KernelResult MakeLog(const KernelContext& ctx);
KernelResult MakeIdentity(const KernelContext& ctx);
KernelResult MakeIsNaN(const KernelContext& ctx);
KernelResult MakeDropout(const KernelContext& ctx);
// gemm.cc
KernelResult MakeGemm(const KernelContext& ctx);
KernelResult MakeMatMul(const KernelContext& ctx);
// conv.cc
KernelResult MakeConv(const KernelContext& ctx);
// pool.cc
KernelResult MakeMaxPool(const KernelContext& ctx);
KernelResult MakeAveragePool(const KernelContext& ctx);
KernelResult MakeGlobalAveragePool(const KernelContext& ctx);
// normalization.cc
KernelResult MakeBatchNormalization(const KernelContext& ctx);
KernelResult MakeLayerNormalization(const KernelContext& ctx);
// softmax.cc
KernelResult MakeSoftmax(const KernelContext& ctx);
KernelResult MakeLogSoftmax(const KernelContext& ctx);
// shape_ops.cc: ops that move elements without arithmetic.
KernelResult MakeFlatten(const KernelContext& ctx);
KernelResult MakeReshape(const KernelContext& ctx);
KernelResult MakeTranspose(const KernelContext& ctx);
KernelResult MakeConcat(const KernelContext& ctx);
KernelResult MakeUnsqueeze(const KernelContext& ctx);
KernelResult MakeSqueeze(const KernelContext& ctx);
KernelResult MakeGather(const KernelContext& ctx);
KernelResult MakePad(const KernelContext& ctx);
// reduce.cc
KernelResult MakeReduceMean(const KernelContext& ctx);
KernelResult MakeReduceSum(const KernelContext& ctx);

}  // namespace fedmesh::graph::ops
