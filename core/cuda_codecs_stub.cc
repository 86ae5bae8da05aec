// The CUDA codecs (core/cuda/cuda_codecs.h) in builds without CUDA: the chains the device
// cannot run are Unimplemented, as in CUDA builds; the rest are Unavailable.
#ifndef FEDMESH_HAVE_CUDA
#include "core/cuda/cuda_codec_plan.h"
#include "core/cuda/cuda_codecs.h"
#include "core/cuda/device_info.h"

namespace fedmesh::cuda {
namespace {

Status NoCuda() {
  return Status::Unavailable(CudaUnavailableReason() +
                             "; encode on the host with codec::Chain::Encode");
}

}  // namespace

struct CudaCodecEncoder::Impl {};

CudaCodecEncoder::CudaCodecEncoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaCodecEncoder::~CudaCodecEncoder() = default;

Result<std::unique_ptr<CudaCodecEncoder>> CudaCodecEncoder::Create(void* /*stream*/) {
  return NoCuda();
}

Status CudaCodecEncoder::Encode(const codec::Chain& chain, const float* /*device_values*/,
                                size_t /*n*/, uint64_t /*seed*/, std::vector<uint8_t>* /*out*/) {
  FM_RETURN_IF_ERROR(PlanCudaEncode(chain).status());
  return NoCuda();
}

Status EncodeOnDevice(const codec::Chain& chain, const float* /*device_values*/, size_t /*n*/,
                      uint64_t /*seed*/, std::vector<uint8_t>* /*out*/) {
  FM_RETURN_IF_ERROR(PlanCudaEncode(chain).status());
  return NoCuda();
}

}  // namespace fedmesh::cuda
#endif
