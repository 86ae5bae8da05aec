// Which codec chains the CUDA encoder (core/cuda/cuda_codecs.h) runs, and how: an optional
// topk sparsifier, then int8 or no quantizer, then an optional compressor (run on the
// host). Header-only host code with no CUDA dependency, so the no-CUDA stub
// (core/cuda_codecs_stub.cc) refuses exactly the same chains.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "core/codec/codec.h"
#include "core/codec/float32_quantizer.h"
#include "core/codec/int8_quantizer.h"
#include "core/codec/top_k.h"
#include "core/status.h"

namespace fedmesh::cuda {

struct CudaCodecPlan {
  bool topk = false;
  uint32_t int8_block = 0;  // 0: the values go as float32
  // The stage whose finiteness check Chain::Encode reports, for the same error message.
  const char* stage = "float32";
};

// The plan for `chain`, or Unimplemented naming the stage the device cannot run.
inline Result<CudaCodecPlan> PlanCudaEncode(const codec::Chain& chain) {
  auto unsupported = [&](const std::string& stage) {
    return Status::Unimplemented(
        "the CUDA encoder runs topk, int8 and float32 stages (zstd on the host), but chain \"" +
        chain.name() + "\" has " + stage +
        "; copy the values to the host and encode them with codec::Chain::Encode");
  };
  CudaCodecPlan plan;
  if (const codec::Sparsifier* s = chain.sparsifier()) {
    if (dynamic_cast<const codec::TopKSparsifier*>(s) == nullptr) return unsupported(s->name());
    plan.topk = true;
  }
  const codec::Quantizer& q = chain.quantizer();
  if (const auto* int8 = dynamic_cast<const codec::Int8Quantizer*>(&q)) {
    plan.int8_block = int8->block();
  } else if (dynamic_cast<const codec::Float32Quantizer*>(&q) == nullptr) {
    return unsupported(q.name());
  }
  plan.stage = plan.topk ? "topk" : (plan.int8_block != 0 ? "int8" : "float32");
  return plan;
}

}  // namespace fedmesh::cuda
