#include "gossip/signed_member.h"

#include <span>
#include <string>

#include "crypto/signing_bytes.h"

namespace fedmesh {
namespace {

constexpr std::string_view kDomain = "fedmesh/gossip-member/v1";

using signing::PutBytes;
using signing::PutString;
using signing::PutU64;

bool About(const PublicIdentity& who, const wire::MemberUpdate& u) {
  return u.id == who.name && u.curve_public == who.curve_public && u.sign_public == who.sign_public;
}

}  // namespace

std::vector<uint8_t> MemberSigningBytes(std::string_view federation, const wire::MemberUpdate& u) {
  std::vector<uint8_t> out;
  out.reserve(128 + federation.size() + u.id.size() + u.endpoint.size());
  PutString(&out, kDomain);
  PutString(&out, federation);
  PutString(&out, u.id);
  PutString(&out, u.endpoint);
  PutBytes(&out, u.curve_public);
  PutBytes(&out, u.sign_public);
  PutU64(&out, u.incarnation);
  return out;
}

Status SignMember(const Identity& signer, std::string_view federation, wire::MemberUpdate* u) {
  if (!About(signer.public_identity(), *u)) {
    return Status::InvalidArgument(signer.name() + " may sign only its own member record, not " +
                                   u->id + "'s");
  }
  auto sig = signer.Sign(MemberSigningBytes(federation, *u));
  if (!sig.ok()) return sig.status();
  u->signature.assign(sig->begin(), sig->end());
  return Status::OK();
}

Status VerifyMember(const PublicIdentity& signer, std::string_view federation,
                    const wire::MemberUpdate& u) {
  if (!About(signer, u)) {
    return Status::PermissionDenied("member record for " + u.id + " is not about " + signer.name +
                                    " with its enrolled keys");
  }
  if (u.signature.empty()) {
    return Status::PermissionDenied("member record for " + u.id + " is unsigned");
  }
  if (!VerifySignature(signer, MemberSigningBytes(federation, u), u.signature)) {
    return Status::PermissionDenied(
        "member record for " + u.id + " has a bad signature (incarnation " +
        std::to_string(u.incarnation) + ", endpoint " + u.endpoint + ")");
  }
  return Status::OK();
}

}  // namespace fedmesh
