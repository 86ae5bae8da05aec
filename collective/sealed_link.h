// SealedLink: one encrypted, authenticated direction between two members of a collective
// group, for ZmqRingTransport's AES-256-GCM security (collective/zmq_ring_transport.h). The
// ZeroMQ connection under it is unencrypted; this is what makes it private and proves who
// sent each chunk. Sans-IO: it makes and reads frames, the transport moves them.
//
// Handshake, in the pattern of Noise KK: the dialer A (sender) knows the acceptor B's static
// X25519 key S_B and B knows A's S_A (both from the group's key files). A sends HELLO (its
// claimed rank, its process's incarnation and a fresh ephemeral key E_A); B answers WELCOME
// (a fresh ephemeral key E_B and a MAC). Both compute
//   BLAKE2b-512(label || S_A || S_B || HELLO || E_B || DH(e_A, E_B) || DH(e_A, S_B) || DH(s_A, E_B))
// whose first 32 bytes are the AES-256-GCM key of the direction A -> B and the next 32 the
// key of WELCOME's MAC. Only A can compute DH(s_A, E_B) (B's ephemeral is fresh), so a chunk
// that opens came from the member whose rank HELLO claimed; only B can compute DH(s_B, E_A),
// so a WELCOME whose MAC verifies came from B. E_B is fresh per connection, so a recorded
// session replayed to a new acceptor opens nothing; within a link each chunk's nonce is a
// counter the receiver expects in order, so a chunk replayed, dropped or reordered fails (the
// connection is first-in first-out, so an honest sender never trips it). The incarnation (a
// random number per transport) is bound into the key, so once a chunk opens it tells B
// truthfully whether A is the process it knew or a restarted one.
//
// Frames (all integers little-endian; every frame starts with magic "FMSL", version 1, type):
//   HELLO    56 bytes: magic, version, type 1, 2 zero bytes, rank u32, 4 zero bytes,
//                      incarnation u64, E_A
//   WELCOME  72 bytes: magic, version, type 2, 2 zero bytes, E_B, MAC(E_A || E_B) (BLAKE2b-256)
//   UNKNOWN   8 bytes: magic, version, type 3, 2 zero bytes: "no link for this connection,
//                      say HELLO again" (the acceptor restarted, or the connection is new)
//   DATA     a first frame of 80 bytes: magic, version, type 4, 2 zero bytes, counter u64,
//            the 48-byte chunk header sealed, the 16-byte GCM tag; then the payload, sealed in
//            place (same length). Nonce: 4 zero bytes then the counter.
// Thread-safety: one thread uses an object.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "crypto/identity.h"
#include "crypto/secure_buffer.h"

namespace fedmesh::collective {

inline constexpr size_t kSealedHelloBytes = 56;
inline constexpr size_t kSealedWelcomeBytes = 72;
inline constexpr size_t kSealedUnknownBytes = 8;
inline constexpr size_t kSealedChunkHeaderBytes = 48;  // the ring chunk header it seals
inline constexpr size_t kSealedDataFrameBytes = 80;

enum class SealedFrameType { kHello, kWelcome, kUnknown, kData, kInvalid };
// The type a first frame claims, by magic, version, type byte and exact size; kInvalid for
// anything else.
SealedFrameType SealedFrameTypeOf(std::string_view frame);
// The 8-byte UNKNOWN frame.
std::string SealedUnknownFrame();

namespace internal {
struct Gcm;  // the OpenSSL context and key of one direction
struct GcmDeleter {
  void operator()(Gcm* g) const;
};
}  // namespace internal

// A's side of a link A -> B.
class SealedSender {
 public:
  // A fresh ephemeral key pair; hello() is the frame to send. `incarnation`: this process's
  // transport's random number (see above). Internal when libsodium fails.
  static Result<SealedSender> Start(const Identity& me, int my_rank, uint64_t incarnation, const CurveKey& acceptor);
  SealedSender(SealedSender&&) noexcept = default;
  SealedSender& operator=(SealedSender&&) noexcept = default;
  ~SealedSender();

  const std::string& hello() const { return hello_; }
  // Takes B's WELCOME: InvalidArgument when `frame` is not a WELCOME, its E_B is a
  // low-order point, or its MAC does not verify under the key this handshake agreed (a
  // WELCOME to an earlier HELLO, or not from B); the sender is unchanged then.
  Status Accept(std::string_view frame);
  bool ready() const { return gcm_ != nullptr; }

  // Seals the 48-byte chunk `header` and `payload` (in place) under the next counter; the
  // result is the DATA frame to send before the payload. Internal if OpenSSL fails.
  // REQUIRES: ready(); header.size() == kSealedChunkHeaderBytes.
  Result<std::string> Seal(std::string_view header, std::span<uint8_t> payload);

 private:
  SealedSender() = default;

  CurveKey me_public_{}, acceptor_{};
  const Identity* me_ = nullptr;
  SecureBuffer ephemeral_secret_;
  CurveKey ephemeral_public_{};
  std::string hello_;
  std::unique_ptr<internal::Gcm, internal::GcmDeleter> gcm_;
  uint64_t counter_ = 0;
};

// B's side of a link A -> B, made from A's HELLO.
class SealedReceiver {
 public:
  // `members`: every member's static X25519 key in rank order. InvalidArgument when `hello`
  // is not a HELLO, claims no member's rank, or carries a low-order point.
  static Result<SealedReceiver> Accept(const Identity& me, std::span<const CurveKey> members,
                                       std::string_view hello);
  SealedReceiver(SealedReceiver&&) noexcept = default;
  SealedReceiver& operator=(SealedReceiver&&) noexcept = default;
  ~SealedReceiver();

  const std::string& welcome() const { return welcome_; }
  // The rank and incarnation HELLO claimed; a chunk that opens proves them.
  int rank() const { return rank_; }
  uint64_t incarnation() const { return incarnation_; }
  // Whether a chunk has opened on this link (so its sender is proven).
  bool proven() const { return counter_ > 0; }

  // Opens a DATA frame and its payload (in place) and returns the 48-byte chunk header.
  // InvalidArgument when the frame is not DATA, its counter is not the next one, or the tag
  // does not verify (the payload's bytes are then garbage; the counter does not advance).
  Result<std::string> Open(std::string_view frame, std::span<uint8_t> payload);

 private:
  SealedReceiver() = default;

  int rank_ = -1;
  uint64_t incarnation_ = 0;
  std::string welcome_;
  std::unique_ptr<internal::Gcm, internal::GcmDeleter> gcm_;
  uint64_t counter_ = 0;
};

}  // namespace fedmesh::collective
