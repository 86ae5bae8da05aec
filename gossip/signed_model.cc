#include "gossip/signed_model.h"

#include <bit>
#include <cstring>
#include <string>

#include "crypto/signing_bytes.h"

#include "core/sha256.h"

namespace fedmesh {
namespace {

constexpr std::string_view kDomain = "fedmesh/gossip-model/v1";

using signing::PutString;
using signing::PutU64;

}  // namespace

std::vector<uint8_t> ModelSigningBytes(std::string_view federation, std::string_view sender,
                                       const wire::GossipModel& m) {
  std::vector<uint8_t> out;
  out.reserve(160 + federation.size() + sender.size() + m.model.codec.size());
  PutString(&out, kDomain);
  PutString(&out, federation);
  PutString(&out, sender);
  PutU64(&out, m.sequence);
  PutU64(&out, static_cast<uint64_t>(m.kind));
  PutU64(&out, m.step);
  PutU64(&out, std::bit_cast<uint64_t>(m.weight));
  PutString(&out, m.model.codec);
  PutU64(&out, m.model.element_count);
  PutU64(&out, m.model.shapes.size());
  for (const auto& dims : m.model.shapes) {
    PutU64(&out, dims.size());
    for (uint64_t d : dims) PutU64(&out, d);
  }
  const Sha256Digest digest = Sha256::Hash(m.model.bytes);
  out.insert(out.end(), digest.begin(), digest.end());
  // Appended only when set, so built-in models sign the same bytes as before.
  if (!m.model_sha256.empty()) PutString(&out, m.model_sha256);
  return out;
}

Status SignModel(const Identity& signer, std::string_view federation, wire::GossipModel* m) {
  auto sig = signer.Sign(ModelSigningBytes(federation, signer.name(), *m));
  if (!sig.ok()) return sig.status();
  m->signature.assign(sig->begin(), sig->end());
  return Status::OK();
}

Status VerifyModel(const PublicIdentity& signer, std::string_view federation,
                   const wire::GossipModel& m) {
  if (m.signature.empty()) {
    return Status::PermissionDenied("gossip model from " + signer.name + " is unsigned");
  }
  if (!VerifySignature(signer, ModelSigningBytes(federation, signer.name, m), m.signature)) {
    return Status::PermissionDenied("gossip model from " + signer.name +
                                    " has a bad signature (sequence " +
                                    std::to_string(m.sequence) + ")");
  }
  return Status::OK();
}

}  // namespace fedmesh
