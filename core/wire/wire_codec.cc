// The wire codec (core/wire/wire_codec.h): Encode and the payload helpers; the checks of
// every field are in wire_checks.cc, decoding in reassembler.cc.
#include "core/wire/wire_codec.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/check.h"
#include "core/wire/chunk_frame.h"
#include "core/wire/fedmesh.pb.h"
#include "core/wire/wire_internal.h"
#include "core/wire/wire_proto.h"

namespace fedmesh::wire {
namespace {

// The domain enums mirror the schema's numbering; these keep the two from drifting.
static_assert(static_cast<uint32_t>(MessageType::kRegister) == pb::MESSAGE_TYPE_REGISTER);
static_assert(static_cast<uint32_t>(MessageType::kRegisterAck) == pb::MESSAGE_TYPE_REGISTER_ACK);
static_assert(static_cast<uint32_t>(MessageType::kFitTask) == pb::MESSAGE_TYPE_FIT_TASK);
static_assert(static_cast<uint32_t>(MessageType::kFitResult) == pb::MESSAGE_TYPE_FIT_RESULT);
static_assert(static_cast<uint32_t>(MessageType::kHeartbeat) == pb::MESSAGE_TYPE_HEARTBEAT);
static_assert(static_cast<uint32_t>(MessageType::kReject) == pb::MESSAGE_TYPE_REJECT);
static_assert(static_cast<uint32_t>(MessageType::kMembership) == pb::MESSAGE_TYPE_MEMBERSHIP);
static_assert(static_cast<uint32_t>(MessageType::kGossipModel) == pb::MESSAGE_TYPE_GOSSIP_MODEL);
static_assert(static_cast<uint32_t>(MessageType::kSecAggAdvertiseKeys) ==
              pb::MESSAGE_TYPE_SECAGG_ADVERTISE_KEYS);
static_assert(static_cast<uint32_t>(MessageType::kSecAggRoster) == pb::MESSAGE_TYPE_SECAGG_ROSTER);
static_assert(static_cast<uint32_t>(MessageType::kSecAggShareKeys) ==
              pb::MESSAGE_TYPE_SECAGG_SHARE_KEYS);
static_assert(static_cast<uint32_t>(MessageType::kSecAggForwardedShares) ==
              pb::MESSAGE_TYPE_SECAGG_FORWARDED_SHARES);
static_assert(static_cast<uint32_t>(MessageType::kSecAggMaskedInput) ==
              pb::MESSAGE_TYPE_SECAGG_MASKED_INPUT);
static_assert(static_cast<uint32_t>(MessageType::kSecAggUnmaskRequest) ==
              pb::MESSAGE_TYPE_SECAGG_UNMASK_REQUEST);
static_assert(static_cast<uint32_t>(MessageType::kSecAggUnmaskShares) ==
              pb::MESSAGE_TYPE_SECAGG_UNMASK_SHARES);
static_assert(static_cast<uint32_t>(MessageType::kTransferQuery) ==
              pb::MESSAGE_TYPE_TRANSFER_QUERY);
static_assert(static_cast<uint32_t>(MessageType::kTransferResume) ==
              pb::MESSAGE_TYPE_TRANSFER_RESUME);
static_assert(static_cast<uint32_t>(TransferState::kPartial) == pb::TRANSFER_STATE_PARTIAL);
static_assert(static_cast<uint32_t>(SecAggSecretKind::kSelfMaskSeed) ==
              pb::SECAGG_SECRET_KIND_SELF_MASK_SEED);
static_assert(static_cast<uint32_t>(SecAggSecretKind::kMaskingKey) ==
              pb::SECAGG_SECRET_KIND_MASKING_KEY);
static_assert(static_cast<uint32_t>(DType::kUint32) == pb::DTYPE_UINT32);
static_assert(static_cast<uint32_t>(MemberState::kDead) == pb::MEMBER_STATE_DEAD);
static_assert(static_cast<uint32_t>(MembershipKind::kSync) == pb::MEMBERSHIP_KIND_SYNC);
static_assert(static_cast<uint32_t>(GossipKind::kSync) == pb::GOSSIP_KIND_SYNC);
static_assert(std::is_same_v<std::variant_alternative_t<0, Body>, Register> &&
                  std::is_same_v<std::variant_alternative_t<1, Body>, RegisterAck> &&
                  std::is_same_v<std::variant_alternative_t<2, Body>, FitTask> &&
                  std::is_same_v<std::variant_alternative_t<3, Body>, FitResult> &&
                  std::is_same_v<std::variant_alternative_t<4, Body>, Heartbeat> &&
                  std::is_same_v<std::variant_alternative_t<5, Body>, Reject> &&
                  std::is_same_v<std::variant_alternative_t<6, Body>, Membership> &&
                  std::is_same_v<std::variant_alternative_t<7, Body>, GossipModel> &&
                  std::is_same_v<std::variant_alternative_t<8, Body>, SecAggAdvertiseKeys> &&
                  std::is_same_v<std::variant_alternative_t<9, Body>, SecAggRoster> &&
                  std::is_same_v<std::variant_alternative_t<10, Body>, SecAggShareKeys> &&
                  std::is_same_v<std::variant_alternative_t<11, Body>, SecAggForwardedShares> &&
                  std::is_same_v<std::variant_alternative_t<12, Body>, SecAggMaskedInput> &&
                  std::is_same_v<std::variant_alternative_t<13, Body>, SecAggUnmaskRequest> &&
                  std::is_same_v<std::variant_alternative_t<14, Body>, SecAggUnmaskShares> &&
                  std::is_same_v<std::variant_alternative_t<15, Body>, TransferQuery> &&
                  std::is_same_v<std::variant_alternative_t<16, Body>, TransferResume> &&
                  std::variant_size_v<Body> == 17,
              "TypeOf() relies on Body listing the types in MessageType order");
static_assert(static_cast<uint32_t>(DType::kFloat32) == pb::DTYPE_FLOAT32);
static_assert(static_cast<uint32_t>(RejectReason::kOverloaded) == pb::REJECT_REASON_OVERLOADED);
static_assert(static_cast<uint32_t>(RejectReason::kTaskFailed) == pb::REJECT_REASON_TASK_FAILED);


}  // namespace

// ---------------------------------------------------------------------------------------

Status ValidateLimits(const WireLimits& l) {
  if (l.max_header_bytes < (size_t{4} << 10) || l.max_header_bytes > (size_t{64} << 20)) {
    return Status::InvalidArgument(StrCat("WireLimits.max_header_bytes is ", l.max_header_bytes,
                                          "; it must be in [4 KiB, 64 MiB]"));
  }
  if (l.max_chunk_bytes < 1 || l.max_chunk_bytes > (size_t{1} << 30)) {
    return Status::InvalidArgument(StrCat("WireLimits.max_chunk_bytes is ", l.max_chunk_bytes,
                                          "; it must be in [1 byte, 1 GiB]"));
  }
  if (l.max_id_bytes < 1 || l.max_id_bytes > 1024) {
    return Status::InvalidArgument(
        StrCat("WireLimits.max_id_bytes is ", l.max_id_bytes, "; it must be in [1, 1024]"));
  }
  if (l.max_payload_bytes > std::numeric_limits<size_t>::max() ||
      l.max_elements > (std::numeric_limits<uint64_t>::max() >> 1)) {
    return Status::InvalidArgument(
        "WireLimits.max_payload_bytes or max_elements is too large for this machine");
  }
  if (l.payload_digest != DigestKind::kSha256 && l.payload_digest != DigestKind::kBlake3) {
    return Status::InvalidArgument(StrCat("WireLimits.payload_digest is ",
                                          static_cast<int>(l.payload_digest),
                                          "; it must be kSha256 or kBlake3"));
  }
  return Status::OK();
}

uint64_t MaxFrameBytes(const WireLimits& limits) {
  return uint64_t{limits.max_header_bytes} + limits.max_chunk_bytes;
}

namespace {

// What Encode and EncodeParted share: every check a receiver makes, the header frame, and
// the header each chunk frame carries.
struct Prepared {
  Framing framing;
  Frame header_frame;
  pb::Header chunk_header;  // type Chunk; set when framing.chunk_count > 0
};

Result<Prepared> Prepare(const Message& message, const WireLimits& l, DigestMemo* memo) {
  FM_RETURN_IF_ERROR(ValidateLimits(l));
  const Body& body = message.body;
  const TensorPayload* payload = PayloadOf(body);
  const uint64_t payload_bytes = payload ? payload->bytes.size() : 0;
  FM_RETURN_IF_ERROR(CheckHeader(message.header, l));
  FM_RETURN_IF_ERROR(CheckBody(message.header, body, payload_bytes, l));

  Prepared out;
  Framing& framing = out.framing;
  if (payload != nullptr) {
    const std::string_view what = PayloadFieldName(body);
    framing.payload_bytes = payload_bytes;
    framing.chunk_bytes = std::min<uint64_t>(l.max_chunk_bytes, payload_bytes);
    const uint64_t count =
        payload_bytes == 0 ? 0 : (payload_bytes + framing.chunk_bytes - 1) / framing.chunk_bytes;
    FM_RETURN_IF_ERROR(CheckFraming(payload_bytes, framing.chunk_bytes, count, what, l));
    framing.chunk_count = static_cast<uint32_t>(count);
    const DigestKind kind = payload->digest ? payload->digest->kind : l.payload_digest;
    framing.digest = memo != nullptr ? memo->Hash(kind, payload->bytes)
                                     : HashPayload(kind, payload->bytes);
    if (payload->digest.has_value() && *payload->digest != framing.digest) {
      return Status::InvalidArgument(StrCat(what, " digest is set to ", DigestText(*payload->digest),
                                            " but the bytes hash to ", DigestText(framing.digest)));
    }
    FM_RETURN_IF_ERROR(CheckPayloadValues(body));
  }

  const uint32_t type = static_cast<uint32_t>(TypeOf(body));
  pb::Envelope env;
  ToProto(message.header, type, env.mutable_header());
  BodyToProto(body, framing, &env);
  const size_t header_size = env.ByteSizeLong();
  if (header_size > l.max_header_bytes) {
    return Status::OutOfRange(StrCat("the ", TypeName(type), " header frame would be ", header_size,
                                     " bytes; the limit is ", l.max_header_bytes,
                                     " (max_header_bytes)"));
  }
  out.header_frame.resize(header_size);
  if (!env.SerializeToArray(out.header_frame.data(), static_cast<int>(header_size))) {
    return Status::Internal("protobuf refused to serialize a validated header frame");
  }
  if (framing.chunk_count > 0) ToProto(message.header, pb::MESSAGE_TYPE_CHUNK, &out.chunk_header);
  return out;
}

}  // namespace

Result<std::vector<Frame>> Encode(const Message& message, const WireLimits& l, DigestMemo* memo) {
  FM_ASSIGN_OR_RETURN(Prepared prepared, Prepare(message, l, memo));
  const Framing& framing = prepared.framing;
  std::vector<Frame> frames;
  frames.reserve(1 + framing.chunk_count);
  frames.push_back(std::move(prepared.header_frame));
  if (framing.chunk_count > 0) {
    // Each chunk frame is written straight from the payload (core/wire/chunk_frame.h):
    // the same bytes protobuf would produce, with one copy instead of three.
    std::string header_bytes;
    if (!prepared.chunk_header.SerializeToString(&header_bytes)) {
      return Status::Internal("protobuf refused to serialize a chunk frame's header");
    }
    const std::span<const uint8_t> header_span(
        reinterpret_cast<const uint8_t*>(header_bytes.data()), header_bytes.size());
    const std::vector<uint8_t>& bytes = PayloadOf(message.body)->bytes;
    for (uint32_t i = 0; i < framing.chunk_count; ++i) {
      const uint64_t offset = uint64_t{i} * framing.chunk_bytes;
      const uint64_t len = std::min<uint64_t>(framing.chunk_bytes, framing.payload_bytes - offset);
      frames.push_back(WriteChunkFrame(header_span, message.header.message_id, i,
                                       framing.chunk_count,
                                       std::span<const uint8_t>(bytes.data() + offset, len)));
      FM_CHECK_LE(frames.back().size(), MaxFrameBytes(l));  // ValidateLimits leaves room
    }
  }
  return frames;
}

std::span<const uint8_t> PartedMessage::DataPart(size_t i) const {
  if (i == 0 || i >= frames.size() || payload == nullptr) return {};
  const uint64_t offset = uint64_t{i - 1} * chunk_bytes;
  const uint64_t len = std::min<uint64_t>(chunk_bytes, payload->size() - offset);
  return {payload->data() + offset, static_cast<size_t>(len)};
}

Result<PartedMessage> EncodeParted(Message message, const WireLimits& l, DigestMemo* memo) {
  FM_ASSIGN_OR_RETURN(Prepared prepared, Prepare(message, l, memo));
  const Framing& framing = prepared.framing;
  PartedMessage out;
  out.frames.reserve(1 + framing.chunk_count);
  out.frames.push_back(std::move(prepared.header_frame));
  if (framing.chunk_count == 0) return out;
  out.chunk_bytes = framing.chunk_bytes;
  out.payload = std::make_shared<const std::vector<uint8_t>>(
      std::move(MutablePayloadOf(message.body)->bytes));
  // A chunk frame without its data is a few dozen bytes: protobuf writes it.
  pb::Envelope env;
  *env.mutable_header() = std::move(prepared.chunk_header);
  pb::Chunk* chunk = env.mutable_chunk();
  chunk->set_transfer_id(message.header.message_id);
  chunk->set_count(framing.chunk_count);
  for (uint32_t i = 0; i < framing.chunk_count; ++i) {
    const uint64_t offset = uint64_t{i} * framing.chunk_bytes;
    chunk->set_index(i);
    chunk->set_detached_bytes(std::min<uint64_t>(framing.chunk_bytes, framing.payload_bytes - offset));
    Frame& f = out.frames.emplace_back(env.ByteSizeLong());
    if (!env.SerializeToArray(f.data(), static_cast<int>(f.size()))) {
      return Status::Internal("protobuf refused to serialize a chunk frame");
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------

TensorPayload FloatPayload(std::span<const float> values,
                           std::vector<std::vector<uint64_t>> shapes) {
  TensorPayload p;
  p.codec = std::string(kCodecNone);
  p.dtype = DType::kFloat32;
  p.element_count = values.size();
  p.shapes = std::move(shapes);
  p.bytes.resize(values.size() * sizeof(float));
  if constexpr (std::endian::native == std::endian::little) {
    if (!values.empty()) std::memcpy(p.bytes.data(), values.data(), p.bytes.size());
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint32_t bits = std::bit_cast<uint32_t>(values[i]);
      for (int b = 0; b < 4; ++b) p.bytes[4 * i + b] = static_cast<uint8_t>(bits >> (8 * b));
    }
  }
  return p;
}

TensorPayload Uint32Payload(std::span<const uint32_t> words) {
  TensorPayload p;
  p.codec = std::string(kCodecNone);
  p.dtype = DType::kUint32;
  p.element_count = words.size();
  p.bytes.resize(words.size() * sizeof(uint32_t));
  if constexpr (std::endian::native == std::endian::little) {
    if (!words.empty()) std::memcpy(p.bytes.data(), words.data(), p.bytes.size());
  } else {
    for (size_t i = 0; i < words.size(); ++i) {
      for (int b = 0; b < 4; ++b) p.bytes[4 * i + b] = static_cast<uint8_t>(words[i] >> (8 * b));
    }
  }
  return p;
}

Result<std::vector<uint32_t>> PayloadUint32s(const TensorPayload& payload) {
  if (payload.codec != kCodecNone) {
    return Status::FailedPrecondition(StrCat("payload has codec \"", payload.codec,
                                             "\"; uint32 words travel only with codec \"none\""));
  }
  if (payload.dtype != DType::kUint32) {
    return Status::InvalidArgument(StrCat(
        "payload has dtype ", static_cast<uint32_t>(payload.dtype), "; it must be uint32 (2)"));
  }
  if (payload.bytes.size() % 4 != 0 || payload.bytes.size() / 4 != payload.element_count) {
    return Status::InvalidArgument(StrCat("payload has ", payload.bytes.size(), " bytes for ",
                                          payload.element_count,
                                          " uint32 elements; it needs 4 per element"));
  }
  std::vector<uint32_t> words(payload.element_count);
  if constexpr (std::endian::native == std::endian::little) {
    if (!words.empty()) std::memcpy(words.data(), payload.bytes.data(), payload.bytes.size());
  } else {
    for (size_t i = 0; i < words.size(); ++i) {
      uint32_t w = 0;
      for (int b = 0; b < 4; ++b) w |= uint32_t{payload.bytes[4 * i + b]} << (8 * b);
      words[i] = w;
    }
  }
  return words;
}

Result<std::vector<float>> PayloadFloats(const TensorPayload& payload) {
  if (payload.codec != kCodecNone) {
    return Status::FailedPrecondition(
        StrCat("payload has codec \"", payload.codec, "\"; decode it with its codec chain first"));
  }
  if (payload.dtype != DType::kFloat32) {
    return Status::InvalidArgument(StrCat("payload has dtype ",
                                          static_cast<uint32_t>(payload.dtype),
                                          "; codec \"none\" holds float32 (1)"));
  }
  if (payload.bytes.size() % 4 != 0 || payload.bytes.size() / 4 != payload.element_count) {
    return Status::InvalidArgument(StrCat("payload has ", payload.bytes.size(), " bytes for ",
                                          payload.element_count,
                                          " float32 elements; it needs 4 per element"));
  }
  if constexpr (std::endian::native == std::endian::little) {
    // The bytes are the floats: one copy, without zero-filling the vector first (a model's
    // update is tens of MB per node; the fill was a whole extra pass over fresh pages). The
    // buffer comes from operator new, aligned for float; the range constructor copies a
    // trivially copyable type with memmove.
    const float* first = reinterpret_cast<const float*>(payload.bytes.data());
    return std::vector<float>(first, first + payload.element_count);
  } else {
    std::vector<float> values(payload.element_count);
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t bits = 0;
      for (int b = 0; b < 4; ++b) bits |= uint32_t{payload.bytes[4 * i + b]} << (8 * b);
      values[i] = std::bit_cast<float>(bits);
    }
    return values;
  }
}

}  // namespace fedmesh::wire
