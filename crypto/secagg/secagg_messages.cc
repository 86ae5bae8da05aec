#include "crypto/secagg/secagg_messages.h"

namespace fedmesh {
namespace {

constexpr std::string_view kAdvertiseDomain = "fedmesh-secagg-advertise-v1";

void AppendLengthPrefixed(std::vector<uint8_t>& out, std::string_view bytes) {
  const uint32_t len = static_cast<uint32_t>(bytes.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(len >> (8 * i)));
  out.insert(out.end(), bytes.begin(), bytes.end());
}

}  // namespace

std::string_view SecAggStageName(SecAggStage stage) {
  switch (stage) {
    case SecAggStage::kAdvertiseKeys:
      return "AdvertiseKeys";
    case SecAggStage::kShareKeys:
      return "ShareKeys";
    case SecAggStage::kMaskedInput:
      return "MaskedInput";
    case SecAggStage::kUnmasking:
      return "Unmasking";
    case SecAggStage::kFinished:
      return "Finished";
  }
  return "unknown";
}

std::string_view SecretKindName(SecretKind kind) {
  switch (kind) {
    case SecretKind::kSelfMaskSeed:
      return "self-mask seed";
    case SecretKind::kMaskingKey:
      return "masking key";
  }
  return "unknown secret";
}

std::vector<uint8_t> AdvertiseSignedBytes(std::string_view federation_id, uint64_t round,
                                          std::string_view client_id,
                                          const CurveKey& channel_public_key,
                                          const CurveKey& masking_public_key) {
  std::vector<uint8_t> out;
  out.reserve(kAdvertiseDomain.size() + federation_id.size() + client_id.size() + 88);
  AppendLengthPrefixed(out, kAdvertiseDomain);
  AppendLengthPrefixed(out, federation_id);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(round >> (8 * i)));
  AppendLengthPrefixed(out, client_id);
  out.insert(out.end(), channel_public_key.begin(), channel_public_key.end());
  out.insert(out.end(), masking_public_key.begin(), masking_public_key.end());
  return out;
}

// Built by appending: GCC 12 warns (-Wrestrict, a false positive) on "'" + s + "'".
std::string QuotedId(std::string_view id) {
  std::string out;
  out.reserve(id.size() + 2);
  out.push_back('\'');
  out.append(id);
  out.push_back('\'');
  return out;
}

}  // namespace fedmesh
