// Reassembler (wire_codec.h): frames of many interleaved messages in, whole checked
// messages out; and Decode, the same for one message's frames.
#include <algorithm>
#include <optional>
#include <utility>

#include "core/check.h"
#include "core/wire/chunk_frame.h"
#include "core/wire/fedmesh.pb.h"
#include "core/wire/wire_codec.h"
#include "core/wire/wire_internal.h"
#include "core/wire/wire_proto.h"

namespace fedmesh::wire {

Reassembler::Reassembler(WireLimits limits, DigestMemo* memo, PendingBudget* budget)
    : limits_(limits), memo_(memo), limits_status_(ValidateLimits(limits_)), budget_(budget) {}

Reassembler::~Reassembler() { ReleaseAll(); }

Reassembler::Reassembler(Reassembler&& other) noexcept
    : limits_(other.limits_),
      memo_(other.memo_),
      limits_status_(std::move(other.limits_status_)),
      pending_(std::move(other.pending_)),
      pending_declared_bytes_(other.pending_declared_bytes_),
      budget_(other.budget_) {
  other.pending_.clear();
  other.pending_declared_bytes_ = 0;
}

Reassembler& Reassembler::operator=(Reassembler&& other) noexcept {
  if (this == &other) return *this;
  ReleaseAll();
  limits_ = other.limits_;
  memo_ = other.memo_;
  limits_status_ = std::move(other.limits_status_);
  pending_ = std::move(other.pending_);
  pending_declared_bytes_ = other.pending_declared_bytes_;
  budget_ = other.budget_;
  other.pending_.clear();
  other.pending_declared_bytes_ = 0;
  return *this;
}

void Reassembler::ReleaseAll() {
  if (budget_ != nullptr) budget_->Release(pending_declared_bytes_);
  pending_.clear();
  pending_declared_bytes_ = 0;
}

size_t Reassembler::DropStalled(Clock::time_point cutoff) {
  size_t dropped = 0;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.last_progress < cutoff) {
      pending_declared_bytes_ -= it->second.payload_bytes;
      if (budget_ != nullptr) budget_->Release(it->second.payload_bytes);
      it = pending_.erase(it);
      ++dropped;
    } else {
      ++it;
    }
  }
  return dropped;
}

uint64_t Reassembler::allocated_bytes() const {
  uint64_t total = 0;
  for (const auto& [key, p] : pending_) total += p.bytes.capacity();
  return total;
}

void Reassembler::MarkResumable() {
  for (auto& [key, p] : pending_) p.resumable = true;
}

std::optional<uint32_t> Reassembler::NextChunk(std::string_view sender_id,
                                               uint64_t message_id) const {
  auto it = pending_.find(Key{std::string(sender_id), message_id});
  if (it == pending_.end()) return std::nullopt;
  return it->second.next_index;
}

std::vector<Reassembler::Progress> Reassembler::PendingProgress() const {
  std::vector<Progress> out;
  out.reserve(pending_.size());
  for (const auto& [key, p] : pending_) {
    out.push_back({key.first, key.second, p.next_index, p.message.header.federation_id});
  }
  return out;
}

bool Reassembler::Drop(std::string_view sender_id, uint64_t message_id) {
  auto it = pending_.find(Key{std::string(sender_id), message_id});
  if (it == pending_.end()) return false;
  pending_declared_bytes_ -= it->second.payload_bytes;
  if (budget_ != nullptr) budget_->Release(it->second.payload_bytes);
  pending_.erase(it);
  return true;
}

Result<std::optional<Message>> Reassembler::Add(std::span<const uint8_t> frame) {
  return AddFrame(frame, nullptr);
}

Result<std::optional<Message>> Reassembler::Add(std::span<const uint8_t> frame,
                                                std::span<const uint8_t> data_part) {
  return AddFrame(frame, &data_part);
}

Result<std::optional<Message>> Reassembler::AddFrame(std::span<const uint8_t> frame,
                                                     const std::span<const uint8_t>* data_part) {
  FM_RETURN_IF_ERROR(limits_status_);
  const WireLimits& l = limits_;
  if (frame.empty()) return Status::Corruption("frame is empty");
  if (frame.size() > MaxFrameBytes(l)) {
    return Status::OutOfRange(StrCat("frame is ", frame.size(), " bytes; the limit is ",
                                     MaxFrameBytes(l), " (max_header_bytes + max_chunk_bytes)"));
  }

  // Small frames parse as a full Envelope. A larger one can only be a chunk and parses
  // as a ChunkFrame view (core/wire/chunk_frame.h): no other body in it is expanded into
  // objects, and its data is read in place rather than copied by protobuf.
  pb::Envelope env;
  pb::Header big_header;
  std::optional<ChunkFrameView> view;
  const bool small = frame.size() <= l.max_header_bytes;
  bool parsed = false;
  if (small) {
    parsed = env.ParseFromArray(frame.data(), static_cast<int>(frame.size()));
  } else {
    view = ParseChunkFrame(frame);
    parsed = view.has_value() &&
             (!view->has_header ||
              big_header.ParseFromArray(view->header.data(), static_cast<int>(view->header.size())));
  }
  if (!parsed) {
    return Status::Corruption(
        StrCat("frame of ", frame.size(), " bytes is not a valid fedmesh.wire Envelope"));
  }
  const bool has_header = small ? env.has_header() : view->has_header;
  if (!has_header) {
    return Status::Corruption("frame has no header; it is truncated or not a fedmesh frame");
  }
  const pb::Header& h = small ? env.header() : big_header;
  if (h.protocol_version() != kProtocolVersion) {
    return Status::FailedPrecondition(StrCat("peer speaks protocol version ", h.protocol_version(),
                                             "; this build speaks ", kProtocolVersion));
  }
  Header header = FromProto(h);
  FM_RETURN_IF_ERROR(CheckHeader(header, l));

  std::optional<ChunkFrameView> chunk;
  if (!small) {
    if (h.type() != pb::MESSAGE_TYPE_CHUNK) {
      return Status::OutOfRange(StrCat(TypeName(h.type()), " header frame from '", header.sender_id,
                                       "' is ", frame.size(), " bytes; the limit is ",
                                       l.max_header_bytes, " (max_header_bytes)"));
    }
    if (!view->has_chunk) {
      return Status::Corruption(
          StrCat("frame from '", header.sender_id, "' says Chunk but has no chunk body"));
    }
    chunk = view;
  } else {
    if (env.body_case() == pb::Envelope::BODY_NOT_SET) {
      if (TypeName(h.type()) == "unknown") {
        return Status::InvalidArgument(StrCat("frame from '", header.sender_id,
                                              "' has message type ", static_cast<int>(h.type()),
                                              ", which this build does not know"));
      }
      return Status::Corruption(StrCat(TypeName(h.type()), " frame from '", header.sender_id,
                                       "' has no body; it is truncated or damaged"));
    }
    if (TypeOfBodyCase(env.body_case()) != static_cast<uint32_t>(h.type())) {
      return Status::Corruption(StrCat("frame from '", header.sender_id, "' says type ",
                                       TypeName(h.type()), " but carries a ",
                                       TypeName(TypeOfBodyCase(env.body_case())), " body"));
    }
    if (env.has_chunk()) {
      const pb::Chunk& c = env.chunk();
      chunk.emplace();
      chunk->transfer_id = c.transfer_id();
      chunk->index = c.index();
      chunk->count = c.count();
      chunk->data = {reinterpret_cast<const uint8_t*>(c.data().data()), c.data().size()};
      chunk->detached_bytes = c.detached_bytes();
    }
  }
  if (data_part != nullptr && !chunk.has_value()) {
    return Status::Corruption(StrCat("a data part came with a ", TypeName(h.type()), " frame from '",
                                     header.sender_id, "'; only a chunk frame that declares "
                                     "detached_bytes has one"));
  }

  // ---- A chunk of a pending message.
  if (chunk.has_value()) {
    auto it = pending_.find(Key{header.sender_id, chunk->transfer_id});
    if (it == pending_.end()) {
      return Status::Corruption(StrCat("chunk ", chunk->index, " of message ",
                                       chunk->transfer_id, " from '", header.sender_id,
                                       "' matches no pending message (an extra frame, or its "
                                       "header frame was rejected or never arrived)"));
    }
    Pending& p = it->second;
    const Header& mh = p.message.header;
    const std::string where = StrCat("chunk ", chunk->index, " of message ", mh.message_id,
                                     " from '", mh.sender_id, "'");
    if (header.federation_id != mh.federation_id || header.round != mh.round ||
        header.model_version != mh.model_version || header.message_id != mh.message_id) {
      return Status::Corruption(StrCat(
          where, " has a header (federation '", header.federation_id, "', round ", header.round,
          ", model_version ", header.model_version, ", message_id ", header.message_id,
          ") that differs from its message's (federation '", mh.federation_id, "', round ",
          mh.round, ", model_version ", mh.model_version, ")"));
    }
    if (chunk->count != p.chunk_count) {
      return Status::Corruption(
          StrCat(where, " says ", chunk->count, " chunks; the message declares ", p.chunk_count));
    }
    if (chunk->index != p.next_index) {
      return Status::Corruption(StrCat(where, " arrived when chunk ", p.next_index, " of ",
                                       p.chunk_count,
                                       " was expected (a frame is missing, repeated or out of "
                                       "order)"));
    }
    std::span<const uint8_t> data = chunk->data;
    if (chunk->detached_bytes != 0 || data_part != nullptr) {
      if (chunk->detached_bytes == 0) {
        return Status::Corruption(
            StrCat(where, " came with a data part but declares no detached_bytes"));
      }
      if (!chunk->data.empty()) {
        return Status::Corruption(StrCat(where, " carries ", chunk->data.size(),
                                         " bytes in its frame and declares ",
                                         chunk->detached_bytes, " in a data part; one or the other"));
      }
      if (data_part == nullptr) {
        return Status::Corruption(StrCat(where, " declares its ", chunk->detached_bytes,
                                         " bytes in a data part, and none came with it"));
      }
      if (data_part->size() != chunk->detached_bytes) {
        return Status::Corruption(StrCat(where, " declares ", chunk->detached_bytes,
                                         " bytes in its data part; the part holds ",
                                         data_part->size()));
      }
      data = *data_part;
    }
    const uint64_t offset = uint64_t{p.next_index} * p.chunk_bytes;
    const uint64_t expected = std::min<uint64_t>(p.chunk_bytes, p.payload_bytes - offset);
    if (data.size() != expected) {
      return Status::Corruption(
          StrCat(where, " carries ", data.size(), " bytes; ", expected, " were declared"));
    }
    // With a shared budget the declared size is already accounted for, so the buffer is
    // sized once at the first chunk (no regrowth copies); without one it grows toward the
    // declared size as bytes arrive, never past it.
    const size_t needed = p.bytes.size() + data.size();
    if (needed > p.bytes.capacity()) {
      p.bytes.reserve(budget_ != nullptr
                          ? static_cast<size_t>(p.payload_bytes)
                          : static_cast<size_t>(std::min<uint64_t>(
                                p.payload_bytes,
                                std::max<uint64_t>(needed, 2 * uint64_t{p.bytes.capacity()}))));
    }
    const auto* d = data.data();
    p.bytes.insert(p.bytes.end(), d, d + data.size());
    if (memo_ == nullptr) p.hasher.Update(std::span<const uint8_t>(d, data.size()));
    p.last_progress = Clock::now();
    p.resumable = false;
    if (++p.next_index < p.chunk_count) return std::optional<Message>();

    // Last chunk: the message leaves the pending set whether or not it checks out.
    Pending done = std::move(p);
    pending_.erase(it);
    pending_declared_bytes_ -= done.payload_bytes;
    if (budget_ != nullptr) budget_->Release(done.payload_bytes);
    const PayloadDigest digest = memo_ != nullptr ? memo_->Hash(done.declared.kind, done.bytes)
                                                  : done.hasher.Finish();
    if (digest != done.declared) {
      return Status::Corruption(StrCat("payload of message ", done.message.header.message_id,
                                       " from '", done.message.header.sender_id, "' fails its ",
                                       DigestKindName(digest.kind), " check (declared ",
                                       DigestText(done.declared), ", received bytes hash to ",
                                       DigestText(digest), "); the message is dropped"));
    }
    TensorPayload* payload = MutablePayloadOf(done.message.body);
    FM_CHECK(payload != nullptr);
    payload->bytes = std::move(done.bytes);
    payload->digest = digest;
    Status values = CheckPayloadValues(done.message.body);
    if (!values.ok()) {
      return values.WithContext(StrCat("message ", done.message.header.message_id, " from '",
                                       done.message.header.sender_id, "' (dropped)"));
    }
    return std::optional<Message>(std::move(done.message));
  }

  // ---- A header frame.
  Message message;
  message.header = std::move(header);
  Framing framing;
  FM_RETURN_IF_ERROR(BodyFromProto(env, l, &message.body, &framing));
  FM_RETURN_IF_ERROR(CheckBody(message.header, message.body, framing.payload_bytes, l));
  TensorPayload* payload = MutablePayloadOf(message.body);
  if (payload == nullptr) return std::optional<Message>(std::move(message));

  const std::string_view what = PayloadFieldName(message.body);
  FM_RETURN_IF_ERROR(
      CheckFraming(framing.payload_bytes, framing.chunk_bytes, framing.chunk_count, what, l));
  if (framing.payload_bytes == 0) {
    if (framing.digest != HashPayload(framing.digest.kind, {})) {
      return Status::Corruption(StrCat(what, " is empty but its ", DigestKindName(framing.digest.kind),
                                       " is not that of no bytes"));
    }
    payload->digest = framing.digest;
    return std::optional<Message>(std::move(message));
  }
  Key key{message.header.sender_id, message.header.message_id};
  if (auto old = pending_.find(key); old != pending_.end() && old->second.resumable) {
    Drop(key.first, key.second);  // the sender started this message over
  }
  if (pending_.count(key) != 0) {
    return Status::AlreadyExists(StrCat("'", key.first, "' already has message ", key.second,
                                        " waiting for chunks; message ids must be unique "
                                        "among a sender's messages in flight"));
  }
  if (pending_.size() >= l.max_pending_messages) {
    return Status::OutOfRange(StrCat("cannot accept message ", key.second, " from '", key.first,
                                     "': ", pending_.size(),
                                     " messages are already waiting for chunks (limit ",
                                     l.max_pending_messages, ", max_pending_messages)"));
  }
  if (framing.payload_bytes >
      l.max_pending_bytes - std::min(l.max_pending_bytes, pending_declared_bytes_)) {
    return Status::OutOfRange(
        StrCat("cannot accept message ", key.second, " from '", key.first, "': its ",
               framing.payload_bytes, " payload bytes and the ", pending_declared_bytes_,
               " already pending exceed max_pending_bytes (", l.max_pending_bytes, ")"));
  }
  if (budget_ != nullptr && !budget_->TryReserve(framing.payload_bytes)) {
    return Status::OutOfRange(
        StrCat("cannot accept message ", key.second, " from '", key.first, "': its ",
               framing.payload_bytes, " payload bytes do not fit in the ",
               budget_->limit() - budget_->used(), " bytes left of the uploads' shared budget (",
               budget_->limit(), "); partial uploads from all peers hold the rest"));
  }
  Pending p;
  p.message = std::move(message);
  p.last_progress = Clock::now();
  p.payload_bytes = framing.payload_bytes;
  p.chunk_bytes = framing.chunk_bytes;
  p.chunk_count = framing.chunk_count;
  p.declared = framing.digest;
  p.hasher = PayloadHasher(framing.digest.kind);
  pending_declared_bytes_ += framing.payload_bytes;
  pending_.emplace(std::move(key), std::move(p));
  return std::optional<Message>();
}

// ---------------------------------------------------------------------------------------

Result<Message> Decode(std::span<const Frame> frames, const WireLimits& limits, DigestMemo* memo) {
  FM_RETURN_IF_ERROR(ValidateLimits(limits));
  if (frames.empty()) {
    return Status::Corruption("no frames; a message is at least its header frame");
  }
  Reassembler r(limits, memo);
  const size_t n = frames.size();
  for (size_t i = 0; i < n; ++i) {
    auto added = r.Add(frames[i]);
    if (!added.ok()) return added.status().WithContext(StrCat("frame ", i, " of ", n));
    if (!added->has_value()) continue;
    if (i + 1 < n) {
      return Status::Corruption(StrCat("frame ", i, " of ", n, " completes the message but ",
                                       n - i - 1,
                                       " more frame(s) follow; a frame sequence holds exactly "
                                       "one message"));
    }
    if (!r.pending_.empty()) {
      return Status::Corruption(StrCat("frame ", i, " of ", n,
                                       " completes a message, but an earlier frame began "
                                       "another one"));
    }
    return std::move(**added);
  }
  if (r.pending_.empty()) return Status::Internal("Decode ended with nothing pending");
  const auto& [key, p] = *r.pending_.begin();
  return Status::Corruption(StrCat("the ", n, " frames end after chunk ", p.next_index, " of ",
                                   p.chunk_count, " of message ", key.second, " from '", key.first,
                                   "'; payload frames are missing"));
}

}  // namespace fedmesh::wire
