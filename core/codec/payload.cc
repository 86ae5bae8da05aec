#include "core/codec/payload.h"

namespace fedmesh::codec {

Result<wire::TensorPayload> EncodePayload(const Chain& chain, std::span<const float> values,
                                          uint64_t seed) {
  std::vector<uint8_t> bytes;
  FM_RETURN_IF_ERROR(chain.Encode(values, seed, &bytes));
  return MakePayload(chain, values.size(), std::move(bytes));
}

wire::TensorPayload MakePayload(const Chain& chain, uint64_t element_count,
                                std::vector<uint8_t> bytes) {
  wire::TensorPayload p;
  p.codec = chain.name();
  p.dtype = wire::DType::kFloat32;
  p.element_count = element_count;
  p.bytes = std::move(bytes);
  return p;
}

namespace {

Result<Chain> HeaderChain(const wire::TensorPayload& payload) {
  FM_ASSIGN_OR_RETURN(Chain chain, Chain::Parse(payload.codec));
  if (payload.dtype != wire::DType::kFloat32) {
    return Status::InvalidArgument("payload dtype " +
                                   std::to_string(static_cast<uint32_t>(payload.dtype)) +
                                   " is not float32 (1), the only dtype codec chains decode to");
  }
  const uint64_t max = chain.MaxEncodedBytes(payload.element_count);
  if (payload.bytes.size() > max) {
    return Status::InvalidArgument("payload of " + std::to_string(payload.element_count) +
                                   " values holds " + std::to_string(payload.bytes.size()) +
                                   " bytes but codec \"" + chain.name() + "\" produces at most " +
                                   std::to_string(max));
  }
  return chain;
}

}  // namespace

Result<std::vector<float>> DecodePayload(const wire::TensorPayload& payload) {
  FM_ASSIGN_OR_RETURN(Chain chain, HeaderChain(payload));
  std::vector<float> out(payload.element_count);
  FM_RETURN_IF_ERROR(chain.Decode(payload.bytes, out));
  return out;
}

}  // namespace fedmesh::codec
