// Z85 (ZeroMQ RFC 32): the text encoding CurveZMQ uses for its 32-byte keys, 5 printable
// characters per 4 bytes, so a key is 40 characters and survives copy/paste, shells and
// config files unquoted. fedmesh has its own codec rather than zmq_z85_decode because that
// one needs a NUL-terminated copy of the input, and for secret keys the input lives inside
// a SecureBuffer that must not be copied out. Output is byte-identical to libzmq's.
// Thread-safety: pure functions, safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace fedmesh {

// Characters of the Z85 text of `byte_count` bytes. REQUIRES: byte_count % 4 == 0.
constexpr size_t Z85EncodedSize(size_t byte_count) { return byte_count / 4 * 5; }

// Writes the Z85 text of `data` into `out` (no terminating NUL).
// REQUIRES: data.size() % 4 == 0 and out.size() == Z85EncodedSize(data.size()).
void Z85Encode(std::span<const uint8_t> data, std::span<char> out);

// The Z85 text of `data` as a string. Use it for public values only: a std::string is not
// wiped when freed. REQUIRES: data.size() % 4 == 0.
std::string Z85Encode(std::span<const uint8_t> data);

// Decodes `text` into `out`. Returns false, with `out` zeroed, when text.size() is not
// Z85EncodedSize(out.size()), a character is outside the Z85 alphabet, or a 5-character
// group encodes a value above 2^32 - 1. REQUIRES: out.size() % 4 == 0.
[[nodiscard]] bool Z85Decode(std::string_view text, std::span<uint8_t> out);

}  // namespace fedmesh
