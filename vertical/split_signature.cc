#include "vertical/split_signature.h"

#include <vector>

#include "core/sha256.h"
#include "crypto/signing_bytes.h"
#include "vertical/split_messages.h"

namespace fedmesh::vertical {
namespace {

constexpr std::string_view kDomain = "fedmesh/split-message/v1";
constexpr size_t kFlagsAt = kSplitFlagsOffset, kHeader = kSplitHeaderBytes;
constexpr uint8_t kSignedFlag = kSplitSignedFlag;

std::vector<uint8_t> SigningBytes(std::string_view federation, std::string_view from, std::string_view to,
                                  std::string_view signed_part) {
  std::vector<uint8_t> out;
  signing::PutString(&out, kDomain);
  signing::PutString(&out, federation);
  signing::PutString(&out, from);
  signing::PutString(&out, to);
  const Sha256Digest d = Sha256::Hash(signed_part);
  out.insert(out.end(), d.begin(), d.end());
  return out;
}

}  // namespace

Result<std::string> SignSplitMessage(const Identity& from, std::string_view federation, std::string_view to,
                                     std::string message) {
  if (message.size() < kHeader || !IsSplitMessage(message)) {
    return Status::InvalidArgument("only a split message can be signed");
  }
  if (static_cast<uint8_t>(message[kFlagsAt]) & kSignedFlag) return Status::InvalidArgument("the message is signed already");
  message[kFlagsAt] = static_cast<char>(static_cast<uint8_t>(message[kFlagsAt]) | kSignedFlag);
  FM_ASSIGN_OR_RETURN(Signature sig, from.Sign(SigningBytes(federation, from.name(), to, message)));
  message.append(reinterpret_cast<const char*>(sig.data()), sig.size());
  return message;
}

Status VerifySplitMessage(const PublicIdentity& from, std::string_view federation, std::string_view to,
                          std::string_view message) {
  const std::string what = "split message from " + from.name;
  if (message.size() < kHeader + kSignatureSize || !IsSplitMessage(message) ||
      !(static_cast<uint8_t>(message[kFlagsAt]) & kSignedFlag)) {
    return Status::PermissionDenied(what + " is unsigned (every party signs what it sends)");
  }
  const std::string_view body = message.substr(0, message.size() - kSignatureSize);
  const std::string_view sig = message.substr(body.size());
  if (!VerifySignature(from, SigningBytes(federation, from.name, to, body),
                       {reinterpret_cast<const uint8_t*>(sig.data()), sig.size()})) {
    return Status::PermissionDenied(what + " has a bad signature (not signed by its key, or not meant for " +
                                    std::string(to) + " in federation " + std::string(federation) + ")");
  }
  return Status::OK();
}

}  // namespace fedmesh::vertical
