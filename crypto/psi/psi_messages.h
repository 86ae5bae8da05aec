// The three messages of ECDH-PSI (crypto/psi/ecdh_psi.h), as bytes, carried by whatever
// links the two parties (a collective transport over CurveZMQ). Layout, little-endian:
//   0  magic "FMPS"          4  version (1)        5  type (1 blinded, 2 double-blinded, 3 confirm)
//   6  reserved u16 = 0      8  total u64          16 offset u64        24 count u32
//   28 reserved u32 = 0      32 tag, 32 bytes      64 count points of 32 bytes each
// total is the size of the whole set the batch belongs to (the intersection for a
// confirm), offset the index of its first point; a set travels as batches in order. tag is
// the sender's order nonce (blinded), zero (double-blinded) or the SHA-256 of the ordered
// intersection (confirm). Nothing in a message is an id: only group elements, which reveal
// nothing about an id without the party's secret scalar.
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "crypto/psi/ristretto_points.h"

namespace fedmesh::psi {

enum class PsiMessageType : uint8_t { kBlinded = 1, kDoubleBlinded = 2, kConfirm = 3 };
inline constexpr size_t kPsiHeaderSize = 64;
using PsiTag = std::array<uint8_t, 32>;

struct PsiMessage {
  PsiMessageType type = PsiMessageType::kBlinded;
  uint64_t total = 0;
  uint64_t offset = 0;
  PsiTag tag{};
  std::string_view points;  // count * 32 bytes, a view into the decoded message
  uint64_t count() const { return points.size() / kPointSize; }
};

std::string EncodePsiMessage(PsiMessageType type, uint64_t total, uint64_t offset, const PsiTag& tag,
                             std::span<const Point> points);

// Corruption saying what is wrong for a short message, wrong magic, version, type or
// reserved bytes, a size that is not the header plus count points, a batch running past
// total, a confirm with points, or total above `max_total` (checked before anything is
// allocated for it).
Result<PsiMessage> DecodePsiMessage(std::string_view bytes, uint64_t max_total);

}  // namespace fedmesh::psi
