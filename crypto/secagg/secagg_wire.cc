#include "crypto/secagg/secagg_wire.h"

#include "core/wire/wire_stats.h"

#include <string>
#include <type_traits>
#include <utility>

#include "core/wire/wire_codec.h"
#include "crypto/secagg/secagg_graph.h"

namespace fedmesh {

// core/ cannot see crypto/, so the wire layer keeps its own copies of the protocol's sizes.
static_assert(wire::kSecAggKeyBytes == kCurveKeySize);
static_assert(wire::kSecAggSignatureBytes == kSignatureSize);
static_assert(wire::kSecAggGraphSeedBytes == kGraphSeedSize);
static_assert(wire::kSecAggShareBytes == kSecAggSecretSize);
static_assert(wire::kSecAggShareBoxBytes == kShareBoxSize);
static_assert(wire::kSecAggMaxNeighbours == kMaxSecAggNeighbours);
static_assert(std::is_same_v<wire::SecAggKey, CurveKey>);
static_assert(std::is_same_v<wire::SecAggSignature, Signature>);

namespace {

Status CheckBox(std::string_view type, size_t index, const SealedShares& box) {
  if (box.box.size() == kShareBoxSize) return Status::OK();
  return Status::InvalidArgument(std::string(type) + " box " + std::to_string(index) + " (from " +
                                 QuotedId(box.from) + " to " + QuotedId(box.to) + ") is " +
                                 std::to_string(box.box.size()) + " bytes; a sealed pair of " +
                                 "shares is " + std::to_string(kShareBoxSize));
}

std::vector<wire::SecAggSealedShares> BoxesToWire(const std::vector<SealedShares>& boxes) {
  std::vector<wire::SecAggSealedShares> out;
  out.reserve(boxes.size());
  for (const SealedShares& b : boxes) out.push_back({b.from, b.to, b.box});
  return out;
}

Result<std::vector<SealedShares>> BoxesFromWire(
    std::string_view type, const std::vector<wire::SecAggSealedShares>& boxes) {
  std::vector<SealedShares> out;
  out.reserve(boxes.size());
  for (size_t i = 0; i < boxes.size(); ++i) {
    out.push_back({boxes[i].sender, boxes[i].recipient, boxes[i].box});
    FM_RETURN_IF_ERROR(CheckBox(type, i, out.back()));
  }
  return out;
}

}  // namespace

wire::SecAggAdvertiseKeys ToWire(const AdvertiseKeys& m) {
  return {m.federation_id,      m.round,    m.client_id, m.channel_public_key,
          m.masking_public_key, m.signature};
}

Result<AdvertiseKeys> FromWire(const wire::SecAggAdvertiseKeys& m) {
  return AdvertiseKeys{m.federation_id,      m.round,    m.client_id, m.channel_public_key,
                       m.masking_public_key, m.signature};
}

wire::SecAggRoster ToWire(const Roster& m) {
  wire::SecAggRoster out;
  out.federation_id = m.federation_id;
  out.round = m.round;
  out.members.reserve(m.members.size());
  for (const AdvertiseKeys& k : m.members) {
    out.members.push_back({k.client_id, k.channel_public_key, k.masking_public_key, k.signature});
  }
  out.graph_seed = m.graph_seed;
  return out;
}

Result<Roster> FromWire(const wire::SecAggRoster& m) {
  Roster out;
  out.federation_id = m.federation_id;
  out.round = m.round;
  out.members.reserve(m.members.size());
  for (const wire::SecAggRosterMember& k : m.members) {
    out.members.push_back({m.federation_id, m.round, k.client_id, k.channel_public_key,
                           k.masking_public_key, k.signature});
  }
  out.graph_seed = m.graph_seed;
  return out;
}

wire::SecAggShareKeys ToWire(const ShareKeys& m) {
  return {m.federation_id, m.round, m.client_id, BoxesToWire(m.boxes)};
}

Result<ShareKeys> FromWire(const wire::SecAggShareKeys& m) {
  ShareKeys out;
  out.federation_id = m.federation_id;
  out.round = m.round;
  out.client_id = m.client_id;
  FM_ASSIGN_OR_RETURN(out.boxes, BoxesFromWire("ShareKeys", m.boxes));
  return out;
}

wire::SecAggForwardedShares ToWire(const ForwardedShares& m) {
  return {m.federation_id, m.round, m.recipient, BoxesToWire(m.boxes)};
}

Result<ForwardedShares> FromWire(const wire::SecAggForwardedShares& m) {
  ForwardedShares out;
  out.federation_id = m.federation_id;
  out.round = m.round;
  out.recipient = m.recipient;
  FM_ASSIGN_OR_RETURN(out.boxes, BoxesFromWire("ForwardedShares", m.boxes));
  return out;
}

wire::SecAggMaskedInput ToWire(const MaskedInput& m) {
  return {m.federation_id, m.round, m.client_id, wire::Uint32Payload(m.masked), {}};
}

Result<MaskedInput> FromWire(const wire::SecAggMaskedInput& m) {
  Result<std::vector<uint32_t>> words = wire::PayloadUint32s(m.masked);
  if (!words.ok()) {
    return words.status().WithContext("the masked input of " + QuotedId(m.client_id));
  }
  MaskedInput out;
  out.federation_id = m.federation_id;
  out.round = m.round;
  out.client_id = m.client_id;
  out.masked = std::move(words).value();
  return out;
}

wire::SecAggUnmaskRequest ToWire(const UnmaskRequest& m) {
  return {m.federation_id, m.round, m.survivors, m.dropped};
}

Result<UnmaskRequest> FromWire(const wire::SecAggUnmaskRequest& m) {
  return UnmaskRequest{m.federation_id, m.round, m.survivors, m.dropped};
}

wire::SecAggUnmaskShares ToWire(const UnmaskShares& m) {
  wire::SecAggUnmaskShares out;
  out.federation_id = m.federation_id;
  out.round = m.round;
  out.client_id = m.client_id;
  out.shares.reserve(m.shares.size());
  for (const RevealedShare& s : m.shares) {
    wire::SecAggRevealedShare w;
    w.owner = s.owner;
    switch (s.kind) {
      case SecretKind::kSelfMaskSeed:
        w.kind = wire::SecAggSecretKind::kSelfMaskSeed;
        break;
      case SecretKind::kMaskingKey:
        w.kind = wire::SecAggSecretKind::kMaskingKey;
        break;
      default:
        w.kind = static_cast<wire::SecAggSecretKind>(0);  // Encode refuses it
        break;
    }
    w.x = s.x;
    w.y = s.y;
    out.shares.push_back(std::move(w));
  }
  return out;
}

Result<UnmaskShares> FromWire(const wire::SecAggUnmaskShares& m) {
  UnmaskShares out;
  out.federation_id = m.federation_id;
  out.round = m.round;
  out.client_id = m.client_id;
  out.shares.reserve(m.shares.size());
  for (size_t i = 0; i < m.shares.size(); ++i) {
    const wire::SecAggRevealedShare& w = m.shares[i];
    const auto where = [&] {
      return "UnmaskShares from " + QuotedId(m.client_id) + ": share " + std::to_string(i) +
             " (of " + QuotedId(w.owner) + ")";
    };
    RevealedShare s;
    s.owner = w.owner;
    switch (w.kind) {
      case wire::SecAggSecretKind::kSelfMaskSeed:
        s.kind = SecretKind::kSelfMaskSeed;
        break;
      case wire::SecAggSecretKind::kMaskingKey:
        s.kind = SecretKind::kMaskingKey;
        break;
      default:
        return Status::InvalidArgument(where() + " has secret kind " +
                                       std::to_string(static_cast<uint32_t>(w.kind)) +
                                       ", which is neither the self-mask seed (1) nor the "
                                       "masking key (2)");
    }
    if (w.x == 0) {
      return Status::InvalidArgument(where() + " has x = 0; Shamir x-coordinates are 1..255");
    }
    if (w.y.size() != kSecAggSecretSize) {
      return Status::InvalidArgument(where() + " is " + std::to_string(w.y.size()) +
                                     " bytes; a share of a secret is " +
                                     std::to_string(kSecAggSecretSize));
    }
    s.x = w.x;
    s.y = w.y;
    out.shares.push_back(std::move(s));
  }
  return out;
}

wire::SecAggParameters ToWire(const SecAggOptions& options, size_t allowlist_size) {
  wire::SecAggParameters p;
  p.threshold = options.threshold;
  p.neighbours = options.neighbours;
  p.clip = options.clip;
  p.bits = options.bits;
  p.min_clients = options.min_clients;
  p.max_clients = options.max_clients != 0 ? options.max_clients : allowlist_size;
  p.noise_stddev = options.noise_stddev;
  return p;
}

Result<SecAggOptions> FromWire(const wire::Header& header, const wire::FitTask& task) {
  if (!task.secagg.has_value()) {
    return Status::FailedPrecondition("the FitTask for round " + std::to_string(task.round) +
                                      " does not ask for secure aggregation");
  }
  const wire::SecAggParameters& p = *task.secagg;
  SecAggOptions options;
  options.federation_id = header.federation_id;
  options.round = task.round;
  options.threshold = p.threshold;
  options.neighbours = p.neighbours;
  options.clip = p.clip;
  options.bits = p.bits;
  // A statistics task sums its encoded figures (core/stats/secure_sums.h), not a model.
  options.vector_size = task.statistics ? wire::SecureStatsWords(*task.statistics)
                                        : static_cast<size_t>(task.global_model.element_count);
  options.min_clients = static_cast<size_t>(p.min_clients);
  options.max_clients = p.max_clients;
  options.noise_stddev = p.noise_stddev;
  Status valid = options.Validate();
  if (!valid.ok()) return valid.WithContext("the FitTask's secure aggregation settings");
  return options;
}

}  // namespace fedmesh
