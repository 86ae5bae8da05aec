#include "crypto/psi/psi_messages.h"

#include <cstring>

namespace fedmesh::psi {
namespace {

constexpr char kMagic[4] = {'F', 'M', 'P', 'S'};
constexpr uint8_t kVersion = 1;

void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

std::string EncodePsiMessage(PsiMessageType type, uint64_t total, uint64_t offset, const PsiTag& tag,
                             std::span<const Point> points) {
  std::string out(kPsiHeaderSize + points.size() * kPointSize, '\0');
  char* p = out.data();
  std::memcpy(p, kMagic, 4);
  p[4] = static_cast<char>(kVersion);
  p[5] = static_cast<char>(type);
  PutU64(p + 8, total);
  PutU64(p + 16, offset);
  const auto count = static_cast<uint32_t>(points.size());
  for (int i = 0; i < 4; ++i) p[24 + i] = static_cast<char>(count >> (8 * i));
  std::memcpy(p + 32, tag.data(), tag.size());
  if (!points.empty()) std::memcpy(p + kPsiHeaderSize, points.data(), points.size() * kPointSize);
  return out;
}

Result<PsiMessage> DecodePsiMessage(std::string_view bytes, uint64_t max_total) {
  auto bad = [](const std::string& why) { return Status::Corruption("psi message: " + why); };
  if (bytes.size() < kPsiHeaderSize) {
    return bad(std::to_string(bytes.size()) + " bytes, shorter than the 64-byte header");
  }
  const char* p = bytes.data();
  if (std::memcmp(p, kMagic, 4) != 0) return bad("wrong magic (not a fedmesh PSI message)");
  if (static_cast<uint8_t>(p[4]) != kVersion) {
    return bad("version " + std::to_string(static_cast<uint8_t>(p[4])) + ", this build speaks version 1");
  }
  const auto type = static_cast<uint8_t>(p[5]);
  if (type < 1 || type > 3) return bad("unknown type " + std::to_string(type));
  uint32_t count = 0;
  for (int i = 3; i >= 0; --i) count = (count << 8) | static_cast<uint8_t>(p[24 + i]);
  if (p[6] != 0 || p[7] != 0 || GetU64(p + 24) >> 32 != 0) return bad("reserved bytes are not zero");
  PsiMessage m;
  m.type = static_cast<PsiMessageType>(type);
  m.total = GetU64(p + 8);
  m.offset = GetU64(p + 16);
  std::memcpy(m.tag.data(), p + 32, m.tag.size());
  if (m.total > max_total) {
    return bad("a set of " + std::to_string(m.total) + " ids is over the limit of " + std::to_string(max_total) +
               " (PsiOptions.max_ids)");
  }
  if (bytes.size() != kPsiHeaderSize + uint64_t{count} * kPointSize) {
    return bad(std::to_string(bytes.size()) + " bytes for " + std::to_string(count) + " points (expected " +
               std::to_string(kPsiHeaderSize + uint64_t{count} * kPointSize) + ")");
  }
  if (m.type == PsiMessageType::kConfirm && (count != 0 || m.offset != 0)) return bad("a confirm carries no points");
  if (m.offset > m.total || count > m.total - m.offset) {
    return bad("batch [" + std::to_string(m.offset) + ", " + std::to_string(m.offset + count) +
               ") runs past the set's " + std::to_string(m.total) + " ids");
  }
  m.points = bytes.substr(kPsiHeaderSize);
  return m;
}

}  // namespace fedmesh::psi
