// The host half of the CUDA codecs (core/cuda/cuda_codecs.h): plans the chain, queues the
// device stages (core/cuda/cuda_codec_kernels.h), then hands the k kept indices and the
// device's value section to Chain::EncodeParts, which writes the same index section and
// compression as Chain::Encode. C++20 host code in the CUDA library: it includes codec.h,
// which the .cu files (C++17) cannot.
#include "core/cuda/cuda_codecs.h"

#include <span>
#include <utility>

#include "core/codec/checks.h"
#include "core/cuda/cuda_codec_kernels.h"
#include "core/cuda/cuda_codec_plan.h"
#include "core/cuda/device_info.h"

namespace fedmesh::cuda {

struct CudaCodecEncoder::Impl {
  std::unique_ptr<CodecDeviceWorkspace> device;
  std::vector<uint32_t> kept;  // host copy of the kept indices, reused
};

CudaCodecEncoder::CudaCodecEncoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaCodecEncoder::~CudaCodecEncoder() = default;

Result<std::unique_ptr<CudaCodecEncoder>> CudaCodecEncoder::Create(void* stream) {
  if (CudaDeviceCount() == 0) {
    return Status::Unavailable("no CUDA device (" + CudaUnavailableReason() +
                               "); encode on the host with codec::Chain::Encode");
  }
  auto impl = std::make_unique<Impl>();
  FM_RETURN_IF_ERROR(CodecDeviceWorkspace::Create(stream, &impl->device));
  return std::unique_ptr<CudaCodecEncoder>(new CudaCodecEncoder(std::move(impl)));
}

Status CudaCodecEncoder::Encode(const codec::Chain& chain, const float* device_values, size_t n,
                                uint64_t /*seed*/, std::vector<uint8_t>* out) {
  FM_ASSIGN_OR_RETURN(const CudaCodecPlan plan, PlanCudaEncode(chain));
  FM_RETURN_IF_ERROR(chain.CheckCount(n));
  std::vector<uint32_t>& kept = impl_->kept;
  kept.clear();
  if (n == 0) {
    return chain.EncodeParts(
        0, kept, [](std::span<uint8_t>) { return Status::OK(); }, out);
  }
  if (device_values == nullptr) {
    return Status::InvalidArgument("EncodeOnDevice: device_values is null for " +
                                   std::to_string(n) + " values");
  }
  CodecDeviceWorkspace& dev = *impl_->device;
  FM_RETURN_IF_ERROR(dev.Begin());
  const float* values = device_values;  // what the quantizer encodes
  uint64_t m = n;
  if (plan.topk) {
    m = chain.sparsifier()->KeptCount(n);
    FM_RETURN_IF_ERROR(dev.EnqueueTopK(device_values, n, m));
    values = dev.kept_values();
  } else if (plan.int8_block == 0) {
    FM_RETURN_IF_ERROR(dev.EnqueueFindNonFinite(device_values, n));
  }
  if (plan.int8_block != 0) {
    // After top-k, the kept values' positions are not input indices: the top-k's own
    // search has already recorded any non-finite input.
    FM_RETURN_IF_ERROR(dev.EnqueueInt8(values, m, plan.int8_block, !plan.topk));
  }
  uint64_t first_non_finite = kNoIndex;
  bool select_ok = true;
  FM_RETURN_IF_ERROR(dev.Wait(&first_non_finite, &select_ok));
  if (first_non_finite != kNoIndex) {
    float v = 0.0f;
    FM_RETURN_IF_ERROR(dev.CopyToHost(device_values + first_non_finite, &v, sizeof(v)));
    return codec::NonFiniteError(plan.stage, first_non_finite, v);
  }
  if (!select_ok) {
    return Status::Internal("CUDA top-k found no threshold for " + std::to_string(n) +
                            " finite values; this is a bug in core/cuda/cuda_codec_kernels.cu");
  }
  if (plan.topk) {
    kept.resize(m);
    FM_RETURN_IF_ERROR(dev.CopyToHost(dev.kept_indices(), kept.data(), m * sizeof(uint32_t)));
  }
  const void* section = plan.int8_block != 0 ? static_cast<const void*>(dev.value_section())
                                             : static_cast<const void*>(values);
  const uint64_t section_bytes =
      plan.int8_block != 0 ? codec::Int8CodesOffset(m, plan.int8_block) + m : 4 * m;
  // EncodeParts checks the kept indices (count, increasing, < n) before it writes them.
  return chain.EncodeParts(
      n, kept,
      [&](std::span<uint8_t> dst) {
        if (dst.size() != section_bytes) {
          return Status::Internal("CUDA codec value section is " + std::to_string(section_bytes) +
                                  " bytes but " + chain.name() + " wants " +
                                  std::to_string(dst.size()));
        }
        return dev.CopyToHost(section, dst.data(), dst.size());
      },
      out);
}

Status EncodeOnDevice(const codec::Chain& chain, const float* device_values, size_t n,
                      uint64_t seed, std::vector<uint8_t>* out) {
  // Refuse unsupported chains before touching the device, as the stub does.
  FM_RETURN_IF_ERROR(PlanCudaEncode(chain).status());
  thread_local std::unique_ptr<CudaCodecEncoder> encoder;
  thread_local int encoder_device = -1;
  if (CudaDeviceCount() == 0) {
    return Status::Unavailable("no CUDA device (" + CudaUnavailableReason() +
                               "); encode on the host with codec::Chain::Encode");
  }
  int device = 0;
  FM_RETURN_IF_ERROR(CurrentCudaDevice(&device));
  if (encoder == nullptr || encoder_device != device) {
    encoder.reset();
    FM_ASSIGN_OR_RETURN(encoder, CudaCodecEncoder::Create());
    encoder_device = device;
  }
  return encoder->Encode(chain, device_values, n, seed, out);
}

}  // namespace fedmesh::cuda
