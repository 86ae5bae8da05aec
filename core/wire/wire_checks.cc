// The wire codec's checks of headers, framing and every message body (CheckHeader,
// CheckBody, ...; declared in wire_internal.h): what Encode refuses to send and the
// Reassembler refuses to accept, with the same words.
#include "core/loss.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/check.h"
#include "core/codec/codec.h"
#include "core/wire/fedmesh.pb.h"
#include "core/wire/wire_internal.h"
#include "core/wire/wire_stats.h"
#include "core/wire/wire_proto.h"

namespace fedmesh::wire {

const TensorPayload* PayloadOf(const Body& body) {
  if (const auto* t = std::get_if<FitTask>(&body)) return &t->global_model;
  if (const auto* r = std::get_if<FitResult>(&body)) return &r->update;
  if (const auto* g = std::get_if<GossipModel>(&body)) return &g->model;
  if (const auto* s = std::get_if<SecAggMaskedInput>(&body)) return &s->masked;
  return nullptr;
}

namespace {

std::string Hex2(uint8_t b) {
  static const char kDigits[] = "0123456789abcdef";
  return std::string("0x") + kDigits[b >> 4] + kDigits[b & 0xF];
}

// ---------------------------------------------------------------------------------------
// Field validation, shared by Encode (on what it is asked to send) and by the receiver (on
// what arrived), so that the two can never disagree.

// Identifiers: 1..max_id_bytes of printable ASCII without space (0x21..0x7E), so that an id
// is safe in a log line, a file name or an SQL literal. Never echoes a bad value.
// A site's DP-SGD report: epsilon finite and >= 0, delta in (0, 1).
Status CheckRecordPrivacy(const std::optional<RecordPrivacyReport>& r, std::string_view type) {
  if (!r) return Status::OK();
  if (!std::isfinite(r->epsilon) || r->epsilon < 0) {
    return Status::InvalidArgument(
        StrCat(type, " record_privacy epsilon is ", r->epsilon, "; it must be finite and >= 0"));
  }
  if (!(r->delta > 0 && r->delta < 1)) {
    return Status::InvalidArgument(
        StrCat(type, " record_privacy delta is ", r->delta, "; it must be in (0, 1)"));
  }
  return Status::OK();
}

Status CheckId(std::string_view value, std::string_view field, const WireLimits& l) {
  if (value.empty()) return Status::InvalidArgument(StrCat(field, " is empty; it is required"));
  if (value.size() > l.max_id_bytes) {
    return Status::OutOfRange(StrCat(field, " is ", value.size(), " bytes; the limit is ",
                                     l.max_id_bytes, " (max_id_bytes)"));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<uint8_t>(value[i]);
    if (c < 0x21 || c > 0x7E) {
      return Status::InvalidArgument(StrCat(field, " has byte ", Hex2(c), " at offset ", i,
                                            "; ids are printable ASCII without spaces"));
    }
  }
  return Status::OK();
}


std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32 (1)";
    case DType::kUint32:
      return "uint32 (2)";
  }
  return "unknown";
}

// Size and shape fields of a payload description, with `payload_bytes` the encoded size
// (declared by the peer, or bytes.size() when sending) and `dtype` the one element type
// the field carries. Touches no payload bytes.
Status CheckPayloadDescription(const TensorPayload& p, uint64_t payload_bytes,
                               std::string_view what, const WireLimits& l,
                               DType dtype = DType::kFloat32) {
  if (payload_bytes > l.max_payload_bytes) {
    return Status::OutOfRange(StrCat(what, " declares ", payload_bytes,
                                     " payload bytes; the limit is ", l.max_payload_bytes,
                                     " (max_payload_bytes)"));
  }
  if (p.element_count > l.max_elements) {
    return Status::OutOfRange(StrCat(what, " declares ", p.element_count,
                                     " elements; the limit is ", l.max_elements,
                                     " (max_elements)"));
  }
  FM_RETURN_IF_ERROR(CheckId(p.codec, StrCat(what, " codec"), l));
  if (p.dtype != dtype) {
    return Status::InvalidArgument(StrCat(what, " has dtype ", static_cast<uint32_t>(p.dtype),
                                          "; it must be ", DTypeName(dtype)));
  }
  if (p.shapes.size() > l.max_tensors) {
    return Status::OutOfRange(StrCat(what, " lists ", p.shapes.size(), " tensors; the limit is ",
                                     l.max_tensors, " (max_tensors)"));
  }
  if (!p.shapes.empty()) {
    uint64_t total = 0;
    for (size_t t = 0; t < p.shapes.size(); ++t) {
      const auto& dims = p.shapes[t];
      if (dims.size() > l.max_dims) {
        return Status::OutOfRange(StrCat(what, " tensor ", t, " has ", dims.size(),
                                         " dims; the limit is ", l.max_dims, " (max_dims)"));
      }
      uint64_t product = 1;
      for (size_t d = 0; d < dims.size(); ++d) {
        if (dims[d] == 0) {
          return Status::InvalidArgument(
              StrCat(what, " tensor ", t, " has dim ", d, " = 0; every dim must be >= 1"));
        }
        // product * dims[d] > max_elements, without overflowing.
        if (dims[d] > l.max_elements / product) {
          return Status::OutOfRange(StrCat(what, " tensor ", t,
                                           " has more elements than the limit of ", l.max_elements,
                                           " (max_elements)"));
        }
        product *= dims[d];
      }
      total += product;  // both <= max_elements <= 2^64 / 2: cannot overflow
      if (total > l.max_elements) {
        return Status::OutOfRange(StrCat(what, " tensors hold more elements than the limit of ",
                                         l.max_elements, " (max_elements)"));
      }
    }
    if (total != p.element_count) {
      return Status::InvalidArgument(StrCat(what, " shapes describe ", total,
                                            " elements but element_count is ", p.element_count));
    }
  }
  auto chain = codec::Chain::Parse(p.codec);
  if (!chain.ok()) return Status::InvalidArgument(StrCat(what, ": ", chain.status().message()));
  if (p.codec != kCodecNone && payload_bytes > chain->MaxEncodedBytes(p.element_count)) {
    // Before any chunk is accepted: a receiver never buffers more than the chain can yield.
    return Status::InvalidArgument(StrCat(what, " declares ", payload_bytes, " bytes but codec \"",
                                          chain->name(), "\" produces at most ",
                                          chain->MaxEncodedBytes(p.element_count), " for ",
                                          p.element_count, " values"));
  }
  if (p.codec == kCodecNone) {
    if (payload_bytes % 4 != 0) {
      return Status::InvalidArgument(StrCat(what, " has codec \"none\" and ", payload_bytes,
                                            " bytes, which is not a whole number of ",
                                            dtype == DType::kUint32 ? "uint32" : "float32",
                                            " values"));
    }
    if (payload_bytes / 4 != p.element_count) {
      return Status::InvalidArgument(StrCat(what, " has codec \"none\" and ", payload_bytes,
                                            " bytes (", payload_bytes / 4,
                                            dtype == DType::kUint32 ? " uint32" : " float32",
                                            " values) but element_count is ", p.element_count));
    }
  }
  return Status::OK();
}


// Every value of a little-endian float32 buffer is finite; names the first that is not.
uint32_t LoadLittleEndian32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

bool IsNonFiniteFloat32(uint32_t bits) { return (bits & 0x7F800000u) == 0x7F800000u; }

Status CheckFiniteFloat32(std::span<const uint8_t> bytes, std::string_view what) {
  const uint8_t* p = bytes.data();
  const size_t n = bytes.size() / 4;
  // Blocks scanned without an early exit (the compiler vectorizes them: every update and
  // model crosses this check on both ends); the index is searched only in a bad block.
  constexpr size_t kBlock = 1024;
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t end = std::min(n, start + kBlock);
    uint32_t bad = 0;
    for (size_t i = start; i < end; ++i) bad |= IsNonFiniteFloat32(LoadLittleEndian32(p + 4 * i));
    if (bad == 0) continue;
    for (size_t i = start; i < end; ++i) {
      const uint32_t bits = LoadLittleEndian32(p + 4 * i);
      if (!IsNonFiniteFloat32(bits)) continue;
      const char* kind = (bits & 0x007FFFFFu) ? "NaN" : ((bits >> 31) ? "-Inf" : "+Inf");
      return Status::InvalidArgument(
          StrCat(what, " value at index ", i, " is ", kind, "; tensor values must be finite"));
    }
  }
  return Status::OK();
}


bool IsFinite(double v) { return std::isfinite(v); }

Status CheckMembership(const Membership& m, const WireLimits& l) {
  if (m.kind < MembershipKind::kPing || m.kind > MembershipKind::kSync) {
    return Status::InvalidArgument(
        StrCat("Membership kind ", static_cast<uint32_t>(m.kind), " is unknown"));
  }
  if (m.kind == MembershipKind::kAck || m.kind == MembershipKind::kPingReq) {
    FM_RETURN_IF_ERROR(CheckId(m.target, "Membership target", l));
  } else if (!m.target.empty()) {
    FM_RETURN_IF_ERROR(CheckId(m.target, "Membership target", l));
  }
  if (m.updates.size() > l.max_members) {
    return Status::OutOfRange(StrCat("Membership carries ", m.updates.size(),
                                     " member updates; the limit is ", l.max_members,
                                     " (max_members)"));
  }
  for (size_t i = 0; i < m.updates.size(); ++i) {
    const MemberUpdate& u = m.updates[i];
    FM_RETURN_IF_ERROR(CheckId(u.id, StrCat("Membership update ", i, " id"), l));
    FM_RETURN_IF_ERROR(CheckId(u.endpoint, StrCat("Membership update ", i, " endpoint"), l));
    if (u.state < MemberState::kAlive || u.state > MemberState::kDead) {
      return Status::InvalidArgument(StrCat("Membership update ", i, " state ",
                                            static_cast<uint32_t>(u.state), " is unknown"));
    }
  }
  return Status::OK();
}

}  // namespace

// ---- Secure aggregation. The helpers below serve both the sender's checks (CheckBody) and
// the receiver's checks made before a field is copied (BodyFromProto), so the two refuse
// with the same words.

// A byte field of fixed length: a key, signature, seed, box or share.
Status CheckExactBytes(size_t size, size_t expected, std::string_view field,
                       std::string_view what_it_is) {
  if (size == expected) return Status::OK();
  return Status::InvalidArgument(
      StrCat(field, " is ", size, " bytes; ", what_it_is, " is ", expected, " bytes"));
}

Status CheckSecAggKeys(std::string_view field, size_t channel, size_t masking, size_t signature) {
  FM_RETURN_IF_ERROR(CheckExactBytes(channel, kSecAggKeyBytes, StrCat(field, " channel_public_key"),
                                     "an X25519 public key"));
  FM_RETURN_IF_ERROR(CheckExactBytes(masking, kSecAggKeyBytes, StrCat(field, " masking_public_key"),
                                     "an X25519 public key"));
  return CheckExactBytes(signature, kSecAggSignatureBytes, StrCat(field, " signature"),
                         "an Ed25519 signature");
}

// A count of listed items, before they are copied.
Status CheckSecAggCount(std::string_view type, size_t count, std::string_view items, size_t limit,
                        std::string_view limit_name) {
  if (count <= limit) return Status::OK();
  return Status::OutOfRange(
      StrCat(type, " lists ", count, " ", items, "; the limit is ", limit, " (", limit_name, ")"));
}

Status CheckSecAggBoxCount(std::string_view type, size_t count) {
  return CheckSecAggCount(type, count, "boxes", kSecAggMaxNeighbours,
                          "kSecAggMaxNeighbours, one per graph neighbour");
}

Status CheckSecAggShareCount(size_t count) {
  return CheckSecAggCount("SecAggUnmaskShares", count, "shares", kSecAggMaxNeighbours,
                          "kSecAggMaxNeighbours, one per graph neighbour");
}

Status CheckSecAggRequestCount(size_t survivors, size_t dropped, const WireLimits& l) {
  return CheckSecAggCount("SecAggUnmaskRequest", survivors + dropped,
                          "clients (survivors and dropped)", l.max_secagg_clients,
                          "max_secagg_clients");
}

namespace {


// A secagg message belongs to the federation and round of the frame that carries it.
Status CheckSecAggScope(std::string_view type, std::string_view federation_id, uint64_t round,
                        const Header& h) {
  if (federation_id != h.federation_id) {
    return Status::InvalidArgument(
        StrCat(type, " federation_id differs from header federation_id '", h.federation_id, "'"));
  }
  if (round != h.round) {
    return Status::InvalidArgument(
        StrCat(type, " round ", round, " differs from header round ", h.round));
  }
  return Status::OK();
}

// A client's message names its sender, which must be the frame's (authenticated) sender:
// the secagg server trusts client_id for everything that is not signed.
Status CheckSecAggClient(std::string_view type, std::string_view client_id, const Header& h,
                         const WireLimits& l) {
  FM_RETURN_IF_ERROR(CheckId(client_id, StrCat(type, " client_id"), l));
  if (client_id != h.sender_id) {
    return Status::InvalidArgument(StrCat(type, " client_id '", client_id,
                                          "' differs from header sender_id '", h.sender_id, "'"));
  }
  return Status::OK();
}

// Sealed boxes; `sender` / `recipient`, when not null, is what every box must name.
Status CheckSealedShares(std::string_view type, const std::vector<SecAggSealedShares>& boxes,
                         const std::string* sender, const std::string* recipient,
                         const WireLimits& l) {
  FM_RETURN_IF_ERROR(CheckSecAggBoxCount(type, boxes.size()));
  for (size_t i = 0; i < boxes.size(); ++i) {
    const SecAggSealedShares& b = boxes[i];
    const std::string field = StrCat(type, " box ", i);
    FM_RETURN_IF_ERROR(CheckId(b.sender, StrCat(field, " sender"), l));
    FM_RETURN_IF_ERROR(CheckId(b.recipient, StrCat(field, " recipient"), l));
    if (sender != nullptr && b.sender != *sender) {
      return Status::InvalidArgument(
          StrCat(field, " sender '", b.sender, "' differs from client_id '", *sender, "'"));
    }
    if (recipient != nullptr && b.recipient != *recipient) {
      return Status::InvalidArgument(StrCat(field, " recipient '", b.recipient,
                                            "' differs from the message's recipient '", *recipient,
                                            "'"));
    }
    FM_RETURN_IF_ERROR(
        CheckExactBytes(b.box.size(), kSecAggShareBoxBytes, field, "a sealed pair of shares"));
  }
  return Status::OK();
}

Status CheckSecAggParameters(const SecAggParameters& p) {
  if (!std::isfinite(p.clip) || p.clip <= 0) {
    return Status::InvalidArgument(
        StrCat("FitTask secagg.clip is ", p.clip, "; it must be finite and > 0"));
  }
  if (!std::isfinite(p.noise_stddev) || p.noise_stddev < 0) {
    return Status::InvalidArgument(
        StrCat("FitTask secagg.noise_stddev is ", p.noise_stddev, "; it must be finite and >= 0"));
  }
  if (p.bits < 2 || p.bits > 32) {
    return Status::InvalidArgument(
        StrCat("FitTask secagg.bits is ", p.bits, "; it must be in [2, 32]"));
  }
  if (p.neighbours % 2 != 0 || p.neighbours > kSecAggMaxNeighbours) {
    return Status::InvalidArgument(
        StrCat("FitTask secagg.neighbours is ", p.neighbours,
               "; it must be 0 (default) or even and <= ", kSecAggMaxNeighbours));
  }
  if (p.threshold > kSecAggMaxNeighbours) {
    return Status::InvalidArgument(StrCat("FitTask secagg.threshold is ", p.threshold,
                                          "; it must be <= ", kSecAggMaxNeighbours));
  }
  if (p.threshold != 0 && p.neighbours != 0 &&
      (p.threshold > p.neighbours || 2 * p.threshold <= p.neighbours)) {
    return Status::InvalidArgument(StrCat("FitTask secagg.threshold is ", p.threshold,
                                          "; it must be more than half of, and at most, the ",
                                          p.neighbours, " neighbours"));
  }
  if (p.min_clients < 2) {
    return Status::InvalidArgument(
        StrCat("FitTask secagg.min_clients is ", p.min_clients, "; it must be >= 2"));
  }
  if (p.max_clients < p.min_clients) {
    return Status::InvalidArgument(StrCat("FitTask secagg.max_clients is ", p.max_clients,
                                          "; it must be >= min_clients (", p.min_clients, ")"));
  }
  return Status::OK();
}


}  // namespace

// ---- Shared with reassembler.cc (declared in wire_internal.h / wire_proto.h).

std::string_view TypeName(uint32_t type) {
  if (type == pb::MESSAGE_TYPE_CHUNK) return "Chunk";
  if ((type >= pb::MESSAGE_TYPE_REGISTER && type <= pb::MESSAGE_TYPE_REJECT) ||
      (type >= pb::MESSAGE_TYPE_MEMBERSHIP && type <= pb::MESSAGE_TYPE_TRANSFER_RESUME)) {
    return MessageTypeName(static_cast<MessageType>(type));
  }
  return "unknown";
}

uint32_t TypeOfBodyCase(pb::Envelope::BodyCase c) {
  switch (c) {
    case pb::Envelope::kRegistration:
      return pb::MESSAGE_TYPE_REGISTER;
    case pb::Envelope::kRegisterAck:
      return pb::MESSAGE_TYPE_REGISTER_ACK;
    case pb::Envelope::kFitTask:
      return pb::MESSAGE_TYPE_FIT_TASK;
    case pb::Envelope::kFitResult:
      return pb::MESSAGE_TYPE_FIT_RESULT;
    case pb::Envelope::kHeartbeat:
      return pb::MESSAGE_TYPE_HEARTBEAT;
    case pb::Envelope::kReject:
      return pb::MESSAGE_TYPE_REJECT;
    case pb::Envelope::kChunk:
      return pb::MESSAGE_TYPE_CHUNK;
    case pb::Envelope::kMembership:
      return pb::MESSAGE_TYPE_MEMBERSHIP;
    case pb::Envelope::kGossipModel:
      return pb::MESSAGE_TYPE_GOSSIP_MODEL;
    case pb::Envelope::kSecaggAdvertiseKeys:
      return pb::MESSAGE_TYPE_SECAGG_ADVERTISE_KEYS;
    case pb::Envelope::kSecaggRoster:
      return pb::MESSAGE_TYPE_SECAGG_ROSTER;
    case pb::Envelope::kSecaggShareKeys:
      return pb::MESSAGE_TYPE_SECAGG_SHARE_KEYS;
    case pb::Envelope::kSecaggForwardedShares:
      return pb::MESSAGE_TYPE_SECAGG_FORWARDED_SHARES;
    case pb::Envelope::kSecaggMaskedInput:
      return pb::MESSAGE_TYPE_SECAGG_MASKED_INPUT;
    case pb::Envelope::kSecaggUnmaskRequest:
      return pb::MESSAGE_TYPE_SECAGG_UNMASK_REQUEST;
    case pb::Envelope::kSecaggUnmaskShares:
      return pb::MESSAGE_TYPE_SECAGG_UNMASK_SHARES;
    case pb::Envelope::kTransferQuery:
      return pb::MESSAGE_TYPE_TRANSFER_QUERY;
    case pb::Envelope::kTransferResume:
      return pb::MESSAGE_TYPE_TRANSFER_RESUME;
    case pb::Envelope::BODY_NOT_SET:
      break;
  }
  return pb::MESSAGE_TYPE_UNSPECIFIED;
}

TensorPayload* MutablePayloadOf(Body& body) { return const_cast<TensorPayload*>(PayloadOf(body)); }

std::string_view PayloadFieldName(const Body& body) {
  if (std::holds_alternative<FitTask>(body)) return "FitTask.global_model";
  if (std::holds_alternative<GossipModel>(body)) return "GossipModel.model";
  if (std::holds_alternative<SecAggMaskedInput>(body)) return "SecAggMaskedInput.masked";
  return "FitResult.update";
}

Status CheckHeader(const Header& h, const WireLimits& l) {
  FM_RETURN_IF_ERROR(CheckId(h.federation_id, "header federation_id", l));
  return CheckId(h.sender_id, "header sender_id", l);
}

// The chunking of a payload: chunk_bytes and chunk_count follow from payload_bytes.
Status CheckFraming(uint64_t payload_bytes, uint64_t chunk_bytes, uint64_t chunk_count,
                    std::string_view what, const WireLimits& l) {
  if (payload_bytes == 0) {
    if (chunk_bytes != 0 || chunk_count != 0) {
      return Status::Corruption(StrCat(what, " has no payload bytes but declares ", chunk_count,
                                       " chunks of ", chunk_bytes, " bytes"));
    }
    return Status::OK();
  }
  if (chunk_bytes == 0) {
    return Status::Corruption(
        StrCat(what, " declares ", payload_bytes, " payload bytes in chunks of 0 bytes"));
  }
  if (chunk_bytes > l.max_chunk_bytes) {
    return Status::OutOfRange(StrCat(what, " declares chunks of ", chunk_bytes,
                                     " bytes; the limit is ", l.max_chunk_bytes,
                                     " (max_chunk_bytes)"));
  }
  if (chunk_count > l.max_chunks) {
    return Status::OutOfRange(StrCat(what, " declares ", chunk_count, " chunks; the limit is ",
                                     l.max_chunks, " (max_chunks)"));
  }
  const uint64_t needed = payload_bytes / chunk_bytes + (payload_bytes % chunk_bytes != 0);
  if (chunk_count != needed) {
    return Status::Corruption(StrCat(what, " declares ", chunk_count, " chunks, but ",
                                     payload_bytes, " bytes in chunks of ", chunk_bytes,
                                     " bytes take ", needed));
  }
  return Status::OK();
}

// Checks on payload contents, once all bytes are present. Float payloads (FitTask's global
// model, FitResult's update, GossipModel's model) require finite values; other codecs are
// checked by the codec layer after decoding. Every uint32 word is a valid element of
// Z_2^32.
Status CheckPayloadValues(const Body& body) {
  const TensorPayload* p = PayloadOf(body);
  if (p == nullptr || p->codec != kCodecNone || p->dtype != DType::kFloat32) return Status::OK();
  return CheckFiniteFloat32(p->bytes, PayloadFieldName(body));
}

// Every field of the body except payload bytes. `payload_bytes`: the size of the body's
// payload (declared by the peer, or bytes.size() when sending); 0 when it has none.
Status CheckBody(const Header& h, const Body& body, uint64_t payload_bytes, const WireLimits& l) {
  if (const auto* m = std::get_if<Register>(&body)) {
    FM_RETURN_IF_ERROR(CheckId(m->node_id, "Register node_id", l));
    if (m->capabilities.size() > l.max_capabilities) {
      return Status::OutOfRange(StrCat("Register lists ", m->capabilities.size(),
                                       " capabilities; the limit is ", l.max_capabilities,
                                       " (max_capabilities)"));
    }
    for (size_t i = 0; i < m->capabilities.size(); ++i) {
      FM_RETURN_IF_ERROR(CheckId(m->capabilities[i], StrCat("Register capability ", i), l));
    }
  } else if (const auto* m = std::get_if<RegisterAck>(&body)) {
    FM_RETURN_IF_ERROR(CheckId(m->node_id, "RegisterAck node_id", l));
  } else if (const auto* m = std::get_if<FitTask>(&body)) {
    if (m->round != h.round) {
      return Status::InvalidArgument(
          StrCat("FitTask round ", m->round, " differs from header round ", h.round));
    }
    if (m->local_epochs < 1) {
      return Status::InvalidArgument("FitTask local_epochs is 0; it must be >= 1");
    }
    if (m->batch_size < 1) {
      return Status::InvalidArgument("FitTask batch_size is 0; it must be >= 1");
    }
    if (!IsFinite(m->learning_rate) || m->learning_rate <= 0) {
      return Status::InvalidArgument(
          StrCat("FitTask learning_rate is ", m->learning_rate, "; it must be finite and > 0"));
    }
    if (!(m->momentum >= 0 && m->momentum < 1)) {
      return Status::InvalidArgument(
          StrCat("FitTask momentum is ", m->momentum, "; it must be in [0, 1)"));
    }
    if (!IsFinite(m->prox_mu) || m->prox_mu < 0) {
      return Status::InvalidArgument(
          StrCat("FitTask prox_mu is ", m->prox_mu, "; it must be finite and >= 0"));
    }
    // Empty: the node uses its own configured chain.
    if (!m->update_codec.empty()) {
      FM_RETURN_IF_ERROR(CheckId(m->update_codec, "FitTask update_codec", l));
      auto chain = codec::Chain::Parse(m->update_codec);
      if (!chain.ok()) {
        return Status::InvalidArgument(StrCat("FitTask update_codec: ", chain.status().message()));
      }
    }
    if (m->secagg.has_value()) FM_RETURN_IF_ERROR(CheckSecAggParameters(*m->secagg));
    if (m->model_graph.size() > l.max_model_graph_bytes) {
      return Status::InvalidArgument(StrCat("FitTask model_graph is ", m->model_graph.size(),
                                            " bytes; the limit is ", l.max_model_graph_bytes));
    }
    if (m->model_sha256.size() != 0 && m->model_sha256.size() != 64) {
      return Status::InvalidArgument("FitTask model_sha256 must be 64 hex digits or empty");
    }
    if (!m->loss.empty() && !ParseLossKind(m->loss).ok()) {
      return Status::InvalidArgument(StrCat("FitTask loss '", m->loss.substr(0, 64),
                                            "' is not cross_entropy, bce_with_logits, mse or huber"));
    }
    if (m->class_weights.size() > 65536) {
      return Status::InvalidArgument("FitTask carries more than 65536 class weights");
    }
    for (float w : m->class_weights) {
      if (!(std::isfinite(w) && w > 0)) {
        return Status::InvalidArgument("FitTask class_weights must be finite and > 0");
      }
    }
    if (!IsFinite(m->pos_weight) || m->pos_weight < 0) {
      return Status::InvalidArgument(
          StrCat("FitTask pos_weight is ", m->pos_weight, "; it must be finite and >= 0"));
    }
    if (m->model_sha256.empty() != m->model_graph.empty()) {
      return Status::InvalidArgument("FitTask carries model_graph and model_sha256 together or neither");
    }
    if (m->statistics.has_value()) {
      if (m->evaluate_only || m->with_prediction || m->global_model.element_count != 0) {
        return Status::InvalidArgument(
            "FitTask statistics is set with evaluate_only, with_prediction or a global model; "
            "a statistics task carries only its request");
      }
      const bool secure_phase2 = m->statistics->secure && m->statistics->phase == 2;
      if (m->secagg.has_value() != secure_phase2) {
        return Status::InvalidArgument(
            "FitTask statistics comes with secagg exactly when it is a secure phase 2");
      }
      FM_RETURN_IF_ERROR(CheckStatsRequest(*m->statistics));
    }
    if ((m->finetune_epochs != 0 || m->local_only_epochs != 0) && !m->evaluate_only) {
      return Status::InvalidArgument(
          "FitTask finetune_epochs / local_only_epochs are set on a task that is not evaluate_only");
    }
    if ((!m->candidate.empty() || m->collect_local_models) && !m->evaluate_only) {
      return Status::InvalidArgument(
          "FitTask candidate / collect_local_models are set on a task that is not evaluate_only");
    }
    if (!m->candidate.empty()) FM_RETURN_IF_ERROR(CheckId(m->candidate, "FitTask candidate", l));
    if (m->impute_values.size() > kMaxStatsFeatures) {
      return Status::OutOfRange(StrCat("FitTask carries ", m->impute_values.size(),
                                       " impute_values; the limit is ", kMaxStatsFeatures));
    }
    for (double v : m->impute_values) {
      if (!IsFinite(v)) return Status::InvalidArgument("FitTask impute_values must be finite");
    }
    if (m->finetune_epochs > kMaxEvalEpochs || m->local_only_epochs > kMaxEvalEpochs) {
      return Status::OutOfRange(StrCat("FitTask finetune_epochs / local_only_epochs exceed ",
                                       kMaxEvalEpochs));
    }
    if (m->evaluate_only && (m->secagg.has_value() || m->with_prediction)) {
      return Status::InvalidArgument(
          "FitTask evaluate_only is set with secagg or with_prediction; an evaluation task "
          "trains nothing");
    }
    if (m->with_prediction) {
      if (m->secagg.has_value()) {
        return Status::InvalidArgument(
            "FitTask with_prediction and secagg are both set; a prediction is never sent to a "
            "secure aggregation round");
      }
      if (m->global_model.element_count == 0 || m->global_model.element_count % 2 != 0) {
        return Status::InvalidArgument(
            StrCat("FitTask with_prediction has global_model.element_count ",
                   m->global_model.element_count, "; it must be 2n, the model and its prediction"));
      }
    }
    FM_RETURN_IF_ERROR(
        CheckPayloadDescription(m->global_model, payload_bytes, "FitTask.global_model", l));
  } else if (const auto* m = std::get_if<FitResult>(&body)) {
    FM_RETURN_IF_ERROR(CheckRecordPrivacy(m->record_privacy, "FitResult"));
    if (!m->signature.empty() && m->signature.size() != 64) {
      return Status::InvalidArgument(StrCat("FitResult signature is ", m->signature.size(),
                                            " bytes; an Ed25519 signature is 64"));
    }
    if (m->round != h.round) {
      return Status::InvalidArgument(
          StrCat("FitResult round ", m->round, " differs from header round ", h.round));
    }
    if (!IsFinite(m->train_loss)) {
      return Status::InvalidArgument(
          StrCat("FitResult train_loss is ", m->train_loss, "; it must be finite"));
    }
    if (m->bytes_after_codec != payload_bytes) {
      return Status::InvalidArgument(StrCat("FitResult bytes_after_codec is ", m->bytes_after_codec,
                                            " but the update has ", payload_bytes, " bytes"));
    }
    FM_RETURN_IF_ERROR(CheckPayloadDescription(m->update, payload_bytes, "FitResult.update", l));
    if (m->statistics.has_value()) {
      if (m->evaluation || m->update.element_count != 0 || payload_bytes != 0 ||
          m->applied_prediction) {
        return Status::InvalidArgument(
            "FitResult statistics carries an update or an evaluation; it sends statistics only");
      }
      FM_RETURN_IF_ERROR(CheckSiteStatistics(*m->statistics));
    }
    if (!m->evaluation && !m->metrics.empty()) {
      return Status::InvalidArgument("FitResult carries metrics but is not an evaluation");
    }
    if (m->local_model && (!m->evaluation || m->update.codec != kCodecNone ||
                           m->update.element_count == 0 || m->applied_prediction)) {
      return Status::InvalidArgument(
          "FitResult local_model needs an evaluation whose update holds the model (codec none)");
    }
    if (m->evaluation && !m->local_model) {
      if (m->update.element_count != 0 || payload_bytes != 0 || m->applied_prediction) {
        return Status::InvalidArgument(
            "FitResult evaluation carries an update; an evaluation sends metrics only");
      }
      if (m->metrics.size() > kMaxEvalMetrics) {
        return Status::OutOfRange(StrCat("FitResult carries ", m->metrics.size(),
                                         " metrics; the limit is ", kMaxEvalMetrics));
      }
      for (const auto& [name, value] : m->metrics) {
        const bool printable = std::all_of(name.begin(), name.end(),
                                           [](char c) { return c > ' ' && c < 0x7f; });
        if (name.empty() || name.size() > 64 || !printable) {
          return Status::InvalidArgument("FitResult metric names must be 1..64 printable "
                                         "characters without spaces");
        }
        if (!IsFinite(value)) {
          return Status::InvalidArgument(
              StrCat("FitResult metric ", name, " is ", value, "; it must be finite"));
        }
      }
    }
  } else if (const auto* m = std::get_if<Membership>(&body)) {
    FM_RETURN_IF_ERROR(CheckMembership(*m, l));
  } else if (const auto* m = std::get_if<GossipModel>(&body)) {
    if (m->kind < GossipKind::kPush || m->kind > GossipKind::kSync) {
      return Status::InvalidArgument(
          StrCat("GossipModel kind ", static_cast<uint32_t>(m->kind), " is unknown"));
    }
    if (!IsFinite(m->weight) || m->weight < 0) {
      return Status::InvalidArgument(
          StrCat("GossipModel weight is ", m->weight, "; it must be finite and >= 0"));
    }
    if (!m->signature.empty() && m->signature.size() != 64) {
      return Status::InvalidArgument(StrCat("GossipModel signature is ", m->signature.size(),
                                            " bytes; an Ed25519 signature is 64"));
    }
    if (!m->model_sha256.empty() && m->model_sha256.size() != 64) {
      return Status::InvalidArgument("GossipModel model_sha256 must be 64 hex digits or empty");
    }
    FM_RETURN_IF_ERROR(CheckPayloadDescription(m->model, payload_bytes, "GossipModel.model", l));
  } else if (const auto* m = std::get_if<SecAggAdvertiseKeys>(&body)) {
    FM_RETURN_IF_ERROR(CheckSecAggScope("SecAggAdvertiseKeys", m->federation_id, m->round, h));
    FM_RETURN_IF_ERROR(CheckSecAggClient("SecAggAdvertiseKeys", m->client_id, h, l));
  } else if (const auto* m = std::get_if<SecAggRoster>(&body)) {
    FM_RETURN_IF_ERROR(CheckSecAggScope("SecAggRoster", m->federation_id, m->round, h));
    FM_RETURN_IF_ERROR(CheckSecAggCount("SecAggRoster", m->members.size(), "members",
                                        l.max_secagg_clients, "max_secagg_clients"));
    for (size_t i = 0; i < m->members.size(); ++i) {
      FM_RETURN_IF_ERROR(
          CheckId(m->members[i].client_id, StrCat("SecAggRoster member ", i, " client_id"), l));
    }
  } else if (const auto* m = std::get_if<SecAggShareKeys>(&body)) {
    FM_RETURN_IF_ERROR(CheckSecAggScope("SecAggShareKeys", m->federation_id, m->round, h));
    FM_RETURN_IF_ERROR(CheckSecAggClient("SecAggShareKeys", m->client_id, h, l));
    FM_RETURN_IF_ERROR(CheckSealedShares("SecAggShareKeys", m->boxes, &m->client_id, nullptr, l));
  } else if (const auto* m = std::get_if<SecAggForwardedShares>(&body)) {
    FM_RETURN_IF_ERROR(CheckSecAggScope("SecAggForwardedShares", m->federation_id, m->round, h));
    FM_RETURN_IF_ERROR(CheckId(m->recipient, "SecAggForwardedShares recipient", l));
    FM_RETURN_IF_ERROR(
        CheckSealedShares("SecAggForwardedShares", m->boxes, nullptr, &m->recipient, l));
  } else if (const auto* m = std::get_if<SecAggMaskedInput>(&body)) {
    FM_RETURN_IF_ERROR(CheckSecAggScope("SecAggMaskedInput", m->federation_id, m->round, h));
    FM_RETURN_IF_ERROR(CheckSecAggClient("SecAggMaskedInput", m->client_id, h, l));
    FM_RETURN_IF_ERROR(CheckRecordPrivacy(m->record_privacy, "SecAggMaskedInput"));
    if (m->masked.codec != kCodecNone) {
      return Status::InvalidArgument(
          "SecAggMaskedInput.masked codec must be \"none\": masked words are uniformly "
          "random, and no lossy codec may touch them");
    }
    FM_RETURN_IF_ERROR(CheckPayloadDescription(m->masked, payload_bytes, "SecAggMaskedInput.masked",
                                               l, DType::kUint32));
  } else if (const auto* m = std::get_if<SecAggUnmaskRequest>(&body)) {
    FM_RETURN_IF_ERROR(CheckSecAggScope("SecAggUnmaskRequest", m->federation_id, m->round, h));
    FM_RETURN_IF_ERROR(CheckSecAggRequestCount(m->survivors.size(), m->dropped.size(), l));
    for (size_t i = 0; i < m->survivors.size(); ++i) {
      FM_RETURN_IF_ERROR(CheckId(m->survivors[i], StrCat("SecAggUnmaskRequest survivor ", i), l));
    }
    for (size_t i = 0; i < m->dropped.size(); ++i) {
      FM_RETURN_IF_ERROR(CheckId(m->dropped[i], StrCat("SecAggUnmaskRequest dropped ", i), l));
    }
  } else if (const auto* m = std::get_if<SecAggUnmaskShares>(&body)) {
    FM_RETURN_IF_ERROR(CheckSecAggScope("SecAggUnmaskShares", m->federation_id, m->round, h));
    FM_RETURN_IF_ERROR(CheckSecAggClient("SecAggUnmaskShares", m->client_id, h, l));
    FM_RETURN_IF_ERROR(CheckSecAggShareCount(m->shares.size()));
    for (size_t i = 0; i < m->shares.size(); ++i) {
      const SecAggRevealedShare& r = m->shares[i];
      FM_RETURN_IF_ERROR(CheckId(r.owner, StrCat("SecAggUnmaskShares share ", i, " owner"), l));
      if (r.kind != SecAggSecretKind::kSelfMaskSeed && r.kind != SecAggSecretKind::kMaskingKey) {
        return Status::InvalidArgument(StrCat("SecAggUnmaskShares share ", i, " kind ",
                                              static_cast<uint32_t>(r.kind), " is unknown"));
      }
      FM_RETURN_IF_ERROR(CheckShareX(r.x, i));
      FM_RETURN_IF_ERROR(CheckExactBytes(r.y.size(), kSecAggShareBytes,
                                         StrCat("SecAggUnmaskShares share ", i, " y"),
                                         "a share of a 32-byte secret"));
    }
  } else if (const auto* m = std::get_if<TransferResume>(&body)) {
    if (m->state != TransferState::kUnknown && m->state != TransferState::kPartial) {
      return Status::InvalidArgument(StrCat("TransferResume state ",
                                            static_cast<uint32_t>(m->state), " is unknown"));
    }
    if (m->state == TransferState::kUnknown && m->next_chunk != 0) {
      return Status::InvalidArgument(StrCat("TransferResume next_chunk is ", m->next_chunk,
                                            " for state UNKNOWN; it must be 0"));
    }
    if (m->next_chunk >= l.max_chunks) {
      return Status::OutOfRange(StrCat("TransferResume next_chunk ", m->next_chunk,
                                       " is past the chunk limit ", l.max_chunks, " (max_chunks)"));
    }
  } else if (const auto* m = std::get_if<Reject>(&body)) {
    if (m->text.size() > l.max_text_bytes) {
      return Status::OutOfRange(StrCat("Reject text is ", m->text.size(), " bytes; the limit is ",
                                       l.max_text_bytes, " (max_text_bytes)"));
    }
    for (size_t i = 0; i < m->text.size(); ++i) {
      const auto c = static_cast<uint8_t>(m->text[i]);
      if (c < 0x20 || c == 0x7F) {
        return Status::InvalidArgument(
            StrCat("Reject text has control byte ", Hex2(c), " at offset ", i));
      }
    }
  }
  return Status::OK();
}

// x-coordinates of Shamir shares are 1..255 (0 is where the secret sits).
Status CheckShareX(uint64_t x, size_t index) {
  if (x >= 1 && x <= 255) return Status::OK();
  return Status::InvalidArgument(
      StrCat("SecAggUnmaskShares share ", index, " x is ", x, "; Shamir x-coordinates are 1..255"));
}


}  // namespace fedmesh::wire
