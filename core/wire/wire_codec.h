// Wire codec: turns a Message into the frames that travel (one ZeroMQ message part each)
// and frames back into Messages. The byte format is in docs/wire.md. In short: a message is
// one header frame (a serialized fedmesh.wire.Envelope, at most max_header_bytes) followed,
// when it carries a tensor payload, by chunk frames of at most max_chunk_bytes of payload
// each, so a model's size is bounded by max_payload_bytes, not by protobuf's 2 GiB cap.
//
// Every size a peer declares is checked against WireLimits before anything is allocated for
// it, and memory for a payload grows only as its chunks arrive. Malformed input yields a
// Status (one sentence, naming the field and both values) and never a crash:
//   Corruption          the bytes are not a well-formed frame sequence: unparsable frame,
//                       missing header or body, missing / extra / reordered / short chunk,
//                       chunk count inconsistent with the declared size, digest mismatch;
//   FailedPrecondition  the peer speaks a protocol version this build does not;
//   OutOfRange          a frame, payload, element count, dims, chunk count, id, text or
//                       list (members, boxes, shares) exceeds its limit, or the
//                       Reassembler is full;
//   InvalidArgument     well-formed but meaningless content: empty or non-printable id,
//                       NaN/Inf values, shapes that disagree with element_count, round
//                       mismatch, hyperparameters out of range, unknown message type,
//                       a key, signature, box or share of the wrong length;
//   AlreadyExists       a second message with the same (sender_id, message_id) in flight.
// Thread-safety: Encode, Decode and the payload helpers are stateless and safe to call
// concurrently. A Reassembler is not thread-safe; give each receiving loop its own.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/wire/pending_budget.h"
#include "core/status.h"
#include "core/wire/digest_memo.h"
#include "core/wire/messages.h"

namespace fedmesh::wire {

// Limits both sides apply. Encode refuses to produce what a receiver with the same limits
// would refuse. Every default is documented in docs/wire.md ("Limits").
struct WireLimits {
  // Largest header frame (any frame that is not a chunk), checked before it is parsed.
  // Default: 1 MiB; a FitTask header listing 4,096 four-dimensional tensors is under 100 KiB.
  // Allowed: 4 KiB .. 64 MiB.
  size_t max_header_bytes = size_t{1} << 20;
  // Payload bytes per chunk frame. Encode cuts a payload into chunks of exactly this size
  // (the last one may be shorter); a receiver rejects a message that declares bigger
  // chunks. Default: 8 MiB: the per-frame overhead (about 100 bytes) is negligible, and a
  // frame takes well under a second on a slow link, so heartbeats sent as separate ZeroMQ
  // messages are not starved. Allowed: 1 byte .. 1 GiB (protobuf caps a frame at 2 GiB).
  size_t max_chunk_bytes = size_t{8} << 20;
  // Largest encoded payload of one message. Default: 4 GiB, a one-billion-parameter
  // float32 model.
  uint64_t max_payload_bytes = uint64_t{4} << 30;
  // Largest dense element count of a payload (after decoding). Default: 2^30 (4 GiB of
  // float32).
  uint64_t max_elements = uint64_t{1} << 30;
  // Most chunk frames per message. Default: 65,536 (4 GiB in 64 KiB chunks).
  uint32_t max_chunks = 65536;
  // Most tensors in one payload's shape list. Default: 4,096.
  uint32_t max_tensors = 4096;
  // Most dims of one tensor. Default: 8.
  uint32_t max_dims = 8;
  // Longest identifier: federation, sender and node ids, capabilities, codec chains.
  // Default: 256 bytes. Allowed: 1 .. 1,024.
  size_t max_id_bytes = 256;
  // Most capabilities in one Register. Default: 64.
  size_t max_capabilities = 64;
  // Most member updates in one gossip Membership message. Default: 4,096 (a Sync of a
  // 4,096-member view is about 500 KiB, under max_header_bytes).
  size_t max_members = 4096;
  // Most members of a secure aggregation roster, and most names in an UnmaskRequest
  // (survivors and dropped together). Default: 4,096 (a roster of 4,096 members with
  // 64-byte ids is about 800 KiB, under max_header_bytes).
  size_t max_secagg_clients = 4096;
  // Largest FitTask.model_graph (an architecture without weights, in the header frame).
  // Default: 512 KiB.
  size_t max_model_graph_bytes = size_t{512} << 10;
  // Longest Reject text. Default: 1,024 bytes.
  size_t max_text_bytes = 1024;
  // Reassembler only: messages waiting for chunks at one time. Default: 64.
  size_t max_pending_messages = 64;
  // Reassembler only: the sum of the declared payload sizes of those messages, which
  // bounds its memory. Default: 8 GiB.
  uint64_t max_pending_bytes = uint64_t{8} << 30;
  // Encode only: the digest written on payloads (a receiver accepts either). Default:
  // BLAKE3, about 3x faster than SHA-256 here; kSha256 for receivers built before BLAKE3
  // was added (they reject a payload without a sha256), e.g. during a rolling upgrade.
  DigestKind payload_digest = DigestKind::kBlake3;
};

// Checks that `limits` are within the allowed ranges above. InvalidArgument naming the
// field otherwise. Encode, Decode and Reassembler::Add call it themselves.
Status ValidateLimits(const WireLimits& limits);

// The largest frame a receiver with `limits` accepts: max_header_bytes + max_chunk_bytes.
// Set the transport's per-message cap (ZMQ_MAXMSGSIZE) to this.
uint64_t MaxFrameBytes(const WireLimits& limits);

// One frame: the bytes of one ZeroMQ message part.
using Frame = std::vector<uint8_t>;

// Validates `message` against `limits` (the same checks a receiver makes, including
// finite values for codec "none" payloads of FitTask and FitResult) and returns its header
// frame followed by ceil(payload / max_chunk_bytes) chunk frames. Errors as listed above;
// InvalidArgument when payload.digest is set and does not match payload.bytes.
// With `memo`, the payload's digest comes from it (the same digest, computed once for
// a payload encoded for many receivers).
Result<std::vector<Frame>> Encode(const Message& message, const WireLimits& limits = {},
                                  DigestMemo* memo = nullptr);

// A message encoded for a transport that sends each chunk's data as its own part, straight
// out of the payload (docs/wire.md, "Chunk data parts"): frames[0] is the header frame,
// frames[1 + i] chunk i's frame, which declares detached_bytes and carries no data, and
// DataPart(1 + i) chunk i's bytes, a view of `payload` (shared, so that a transport can
// hold it until the socket is done with it).
struct PartedMessage {
  std::vector<Frame> frames;
  std::shared_ptr<const std::vector<uint8_t>> payload;  // null without chunks
  uint64_t chunk_bytes = 0;
  // The data part that follows frames[i]: empty for the header frame (and without chunks).
  std::span<const uint8_t> DataPart(size_t i) const;
};

// As Encode, the same checks and errors, but the payload's bytes are moved out of
// `message` into the result instead of being copied into chunk frames.
Result<PartedMessage> EncodeParted(Message message, const WireLimits& limits = {},
                                   DigestMemo* memo = nullptr);

// Decodes the frames of exactly one message, as Encode produced them (e.g. the parts of
// one ZeroMQ multipart message). Fails with Corruption when a frame is missing, extra,
// or belongs to another message; errors name the frame index. With `memo`, the check of
// the payload against its declared digest hashes the received bytes through it.
Result<Message> Decode(std::span<const Frame> frames, const WireLimits& limits = {},
                       DigestMemo* memo = nullptr);

// Collects frames that arrive one at a time, possibly interleaved across senders and
// messages, and yields each message once its last frame has arrived. Chunks of one
// message must arrive in order.
//
// A rejected frame leaves the Reassembler as it was: pending messages keep their bytes,
// and a correct frame may still follow. The exception is the frame that completes a
// message whose payload then fails its digest or finite-value check: that message is
// dropped, since no later frame can repair it. Pending messages never expire by
// themselves; the owner calls DropStalled (or Drop) for those that stopped progressing.
//
// Memory: a header frame costs its parsed fields only; payload memory grows as chunks
// arrive, up to the declared size, and never beyond max_pending_bytes in total, nor beyond
// what a shared PendingBudget has left.
class Reassembler {
 public:
  using Clock = std::chrono::steady_clock;
  // `memo` (optional, outliving this): completed payloads are hashed through it, once
  // whole, rather than chunk by chunk as they arrive. `budget` (optional, outliving this):
  // every pending message's declared size is reserved in it, and a header frame whose
  // payload does not fit is refused (OutOfRange).
  explicit Reassembler(WireLimits limits = {}, DigestMemo* memo = nullptr,
                       PendingBudget* budget = nullptr);
  ~Reassembler();
  Reassembler(Reassembler&& other) noexcept;
  Reassembler& operator=(Reassembler&& other) noexcept;

  // Accepts one frame. Returns the completed message, std::nullopt when it is waiting for
  // more chunks, or an error for a bad frame.
  Result<std::optional<Message>> Add(std::span<const uint8_t> frame);
  // Accepts a chunk frame that declares detached_bytes together with its data part, the
  // part that followed it in the same ZeroMQ message (docs/wire.md, "Chunk data parts").
  // Corruption when `frame` is not such a chunk or the part is not the declared size.
  Result<std::optional<Message>> Add(std::span<const uint8_t> frame,
                                     std::span<const uint8_t> data_part);

  // The connection the pending messages came on is gone (resumed uploads, docs/wire.md):
  // each stays, a chunk with its next index continues it, and a header frame with its key
  // replaces it (the sender started the message over, e.g. after a restart) instead of
  // being refused as a duplicate. A pending message that receives a chunk is live again.
  void MarkResumable();
  // The index of the first chunk still missing from the pending message (sender_id,
  // message_id): what a sender that lost its connection sends from. nullopt when no such
  // message is pending.
  std::optional<uint32_t> NextChunk(std::string_view sender_id, uint64_t message_id) const;
  // (sender_id, message_id, next chunk) of every pending message, in key order.
  struct Progress {
    std::string sender_id;
    uint64_t message_id = 0;
    uint32_t next_chunk = 0;
    std::string federation_id;
  };
  std::vector<Progress> PendingProgress() const;

  // Discards the pending message (sender_id, message_id). Returns whether there was one.
  bool Drop(std::string_view sender_id, uint64_t message_id);
  // Discards the pending messages that received no frame since `cutoff`; returns how many.
  size_t DropStalled(Clock::time_point cutoff);

  size_t pending_messages() const { return pending_.size(); }
  // Sum of the declared payload sizes of the pending messages.
  uint64_t pending_declared_bytes() const { return pending_declared_bytes_; }
  // Bytes actually allocated for pending payloads (vector capacities).
  uint64_t allocated_bytes() const;

 private:
  // A message whose header frame arrived and whose chunks are still coming.
  struct Pending {
    Message message;  // its payload's bytes stay empty until the last chunk
    uint64_t payload_bytes = 0;
    uint64_t chunk_bytes = 0;
    uint32_t chunk_count = 0;
    PayloadDigest declared;
    uint32_t next_index = 0;
    std::vector<uint8_t> bytes;  // chunks 0 .. next_index-1
    PayloadHasher hasher;        // over `bytes`, fed as chunks arrive (without a memo)
    Clock::time_point last_progress;  // its header or latest chunk
    bool resumable = false;           // see MarkResumable
  };
  using Key = std::pair<std::string, uint64_t>;  // (sender_id, message_id)

  friend Result<Message> Decode(std::span<const Frame> frames, const WireLimits& limits,
                                DigestMemo* memo);

  // Both Adds: `data_part` null for a frame that came alone.
  Result<std::optional<Message>> AddFrame(std::span<const uint8_t> frame,
                                          const std::span<const uint8_t>* data_part);

  WireLimits limits_;
  DigestMemo* memo_;
  Status limits_status_;  // ValidateLimits(limits_), reported by every Add
  std::map<Key, Pending, std::less<>> pending_;
  uint64_t pending_declared_bytes_ = 0;
  PendingBudget* budget_ = nullptr;
  void ReleaseAll();
};

// A codec "none" payload holding `values` as little-endian float32. `shapes` as in
// TensorPayload (empty: flat). digest is left unset.
TensorPayload FloatPayload(std::span<const float> values,
                           std::vector<std::vector<uint64_t>> shapes = {});

// A codec "none" payload of dtype uint32 holding `words` little-endian (a secure
// aggregation masked input). digest is left unset.
TensorPayload Uint32Payload(std::span<const uint32_t> words);

// The words of a codec "none" uint32 payload. FailedPrecondition for another codec;
// InvalidArgument when dtype is not uint32 or the byte count is not 4 * element_count.
Result<std::vector<uint32_t>> PayloadUint32s(const TensorPayload& payload);

// The float32 values of a codec "none" payload. FailedPrecondition for another codec
// (decode it with its codec chain first); InvalidArgument when dtype is not float32 or the
// byte count is not 4 * element_count.
Result<std::vector<float>> PayloadFloats(const TensorPayload& payload);

}  // namespace fedmesh::wire
