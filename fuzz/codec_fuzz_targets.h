// libFuzzer targets for the codec chain decoders (core/codec/codec.h): one per stage and one
// over whole chains. Each entry point checks the decoder contract on hostile bytes and traps
// (__builtin_trap) on a violation; fuzz/<name>_fuzz.cc wraps one for libFuzzer, and
// tests/core/codec_fuzz_test.cc runs them all over a fixed corpus inside core_tests.
//
// An input is a 3-byte header and a payload:
//   byte 0      selector: bits 0-6 pick the stage parameters from the target's table
//               (index modulo its size); bit 7 set asks for an encode round trip instead
//   bytes 1-2   element count, little-endian; kFitCount means "the largest count whose
//               maximum encoded size fits the payload" (the exact count for dense chains)
//   bytes 3..   decode: the bytes handed to Chain::Decode
//               round trip: float32 values to Encode, then Decode
//
// Decode contract checked: an error is Corruption; after OK every value is finite (the
// output starts as NaN, so an element left unwritten is caught), a sparse chain has at most
// k nonzeros, and re-encoding the decoded vector with a chain whose decode is a fixed point
// (lossless chains, fp16, bf16, topk over those) decodes to the same vector; dense
// uncompressed float32 / fp16 / bf16 must even re-encode to the same bytes.
// Round-trip contract: non-finite input gives InvalidArgument; small finite input encodes;
// what encodes decodes, within the error bound each stage documents.
//
// Thread-safety: entry points and RunInput are pure functions of their input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fedmesh::fuzz {

inline constexpr size_t kHeaderBytes = 3;
inline constexpr uint8_t kRoundTripBit = 0x80;
inline constexpr uint16_t kFitCount = 0xFFFF;

// What one input did. A violation makes the entry points trap.
enum class Outcome {
  kTooShort,       // no complete header
  kDecoded,        // Decode returned OK and every check passed
  kRejected,       // Decode returned Corruption
  kEncoded,        // round trip: Encode and Decode succeeded within bounds
  kEncodeRefused,  // round trip: Encode returned InvalidArgument, as it may
  kViolation,      // a contract was broken; ViolationMessage() says which
};

struct FuzzTarget {
  std::string_view name;  // "int8": built from fuzz/int8_fuzz.cc into build-fuzz/int8_fuzz
  int (*entry)(const uint8_t* data, size_t size);
  std::span<const std::string_view> chains;  // the parameter table; selector picks one
};

// Every target, in a fixed order.
std::span<const FuzzTarget> AllTargets();

// Runs one input through `target` without trapping.
Outcome RunInput(const FuzzTarget& target, const uint8_t* data, size_t size);
// What the last kViolation on this thread was about.
const std::string& ViolationMessage();

// Builds an input: header for `selector` and `count`, then `payload`.
std::vector<uint8_t> MakeInput(uint8_t selector, uint16_t count, std::span<const uint8_t> payload);

// Valid inputs for `target`: for each parameter set, seeded random vectors of several sizes
// and shapes encoded with the chain (decode inputs), plus a few round-trip inputs. The same
// seed gives the same inputs. *valid_decodes (optional) counts the decode inputs among them;
// they come first.
std::vector<std::vector<uint8_t>> SeedInputs(const FuzzTarget& target, uint64_t seed,
                                             size_t* valid_decodes = nullptr);

int FuzzFloat32(const uint8_t* data, size_t size);  // "none"
int FuzzFp16(const uint8_t* data, size_t size);
int FuzzBf16(const uint8_t* data, size_t size);
int FuzzInt8(const uint8_t* data, size_t size);   // int8:<block>, blocks 1 .. 2^24
int FuzzQsgd(const uint8_t* data, size_t size);   // qsgd:<levels>:<bucket>
int FuzzTopK(const uint8_t* data, size_t size);   // topk:<ratio>, float32 values
int FuzzRandK(const uint8_t* data, size_t size);  // randk:<ratio>, float32 values
int FuzzZstd(const uint8_t* data, size_t size);   // zstd:<level> over float32
int FuzzChain(const uint8_t* data, size_t size);  // multi-stage chains

}  // namespace fedmesh::fuzz
