#include "crypto/z85.h"

#include <algorithm>
#include <array>

#include "core/check.h"

namespace fedmesh {
namespace {

constexpr std::string_view kAlphabet =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
static_assert(kAlphabet.size() == 85);

// Character -> digit, 0xff for characters outside the alphabet.
constexpr std::array<uint8_t, 256> MakeDecoder() {
  std::array<uint8_t, 256> d{};
  d.fill(0xff);
  for (size_t i = 0; i < kAlphabet.size(); ++i) {
    d[static_cast<unsigned char>(kAlphabet[i])] = static_cast<uint8_t>(i);
  }
  return d;
}
constexpr std::array<uint8_t, 256> kDecoder = MakeDecoder();

}  // namespace

void Z85Encode(std::span<const uint8_t> data, std::span<char> out) {
  FM_CHECK_EQ(data.size() % 4, size_t{0});
  FM_CHECK_EQ(out.size(), Z85EncodedSize(data.size()));
  for (size_t i = 0, o = 0; i < data.size(); i += 4, o += 5) {
    // Big-endian 32-bit group, written as 5 base-85 digits, most significant first.
    uint32_t value = (uint32_t{data[i]} << 24) | (uint32_t{data[i + 1]} << 16) |
                     (uint32_t{data[i + 2]} << 8) | uint32_t{data[i + 3]};
    for (int k = 4; k >= 0; --k) {
      out[o + static_cast<size_t>(k)] = kAlphabet[value % 85];
      value /= 85;
    }
  }
}

std::string Z85Encode(std::span<const uint8_t> data) {
  std::string text(Z85EncodedSize(data.size()), '\0');
  Z85Encode(data, std::span<char>(text.data(), text.size()));
  return text;
}

bool Z85Decode(std::string_view text, std::span<uint8_t> out) {
  FM_CHECK_EQ(out.size() % 4, size_t{0});
  if (text.size() != Z85EncodedSize(out.size())) {
    std::fill(out.begin(), out.end(), uint8_t{0});
    return false;
  }
  for (size_t i = 0, o = 0; i < text.size(); i += 5, o += 4) {
    uint64_t value = 0;  // 64 bits so that an over-range group is detected, not wrapped
    for (size_t k = 0; k < 5; ++k) {
      const uint8_t digit = kDecoder[static_cast<unsigned char>(text[i + k])];
      if (digit == 0xff) {
        std::fill(out.begin(), out.end(), uint8_t{0});
        return false;
      }
      value = value * 85 + digit;
    }
    if (value > 0xffffffffu) {
      std::fill(out.begin(), out.end(), uint8_t{0});
      return false;
    }
    out[o] = static_cast<uint8_t>(value >> 24);
    out[o + 1] = static_cast<uint8_t>(value >> 16);
    out[o + 2] = static_cast<uint8_t>(value >> 8);
    out[o + 3] = static_cast<uint8_t>(value);
  }
  return true;
}

}  // namespace fedmesh
