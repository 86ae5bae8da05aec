#include "crypto/update_signature.h"

#include <bit>
#include <string>

#include "crypto/signing_bytes.h"

namespace fedmesh {
namespace {

constexpr std::string_view kDomainSha256 = "fedmesh/update/v1";
constexpr std::string_view kDomainBlake3 = "fedmesh/update/v2";

using signing::PutString;
using signing::PutU64;

}  // namespace

std::vector<uint8_t> UpdateSigningBytes(std::string_view federation, std::string_view node,
                                        uint64_t model_version, const wire::FitResult& r,
                                        const wire::PayloadDigest& payload_digest) {
  std::vector<uint8_t> out;
  out.reserve(192 + federation.size() + node.size() + r.update.codec.size());
  PutString(&out, payload_digest.kind == wire::DigestKind::kSha256 ? kDomainSha256 : kDomainBlake3);
  PutString(&out, federation);
  PutString(&out, node);
  PutU64(&out, r.round);
  PutU64(&out, model_version);
  PutU64(&out, r.num_examples);
  PutU64(&out, std::bit_cast<uint64_t>(r.train_loss));
  PutU64(&out, r.applied_prediction ? 1 : 0);
  PutString(&out, r.update.codec);
  PutU64(&out, r.update.element_count);
  PutU64(&out, r.update.shapes.size());
  for (const auto& dims : r.update.shapes) {
    PutU64(&out, dims.size());
    for (uint64_t d : dims) PutU64(&out, d);
  }
  out.insert(out.end(), payload_digest.bytes.begin(), payload_digest.bytes.end());
  return out;
}

Status SignUpdate(const Identity& signer, std::string_view federation, uint64_t model_version,
                  wire::FitResult* r, wire::DigestKind kind) {
  const wire::PayloadDigest digest = wire::HashPayload(kind, r->update.bytes);
  auto sig = signer.Sign(UpdateSigningBytes(federation, signer.name(), model_version, *r, digest));
  if (!sig.ok()) return sig.status();
  r->signature.assign(sig->begin(), sig->end());
  r->update.digest = digest;
  return Status::OK();
}

wire::PayloadDigest UpdateDigest(const wire::FitResult& r) {
  return r.update.digest ? *r.update.digest : wire::HashPayload(wire::DigestKind::kBlake3, r.update.bytes);
}

Status VerifyUpdate(const PublicIdentity& signer, std::string_view federation,
                    uint64_t model_version, const wire::FitResult& r) {
  const std::string what = "the update of " + signer.name + " for round " + std::to_string(r.round);
  if (r.signature.empty()) return Status::PermissionDenied(what + " is unsigned");
  const wire::PayloadDigest digest = UpdateDigest(r);
  if (!VerifySignature(signer, UpdateSigningBytes(federation, signer.name, model_version, r, digest),
                       r.signature)) {
    return Status::PermissionDenied(what + " has a bad signature");
  }
  return Status::OK();
}

}  // namespace fedmesh
