// How split training's activations and gradients travel over the cut (docs/vertical.md,
// "Compression"): float32 as is; fp16 or bf16 at half the bytes (collective/wire_floats.h,
// as ring all-reduce sends them); or int8 through the codec chain's quantizer
// (core/codec/int8_quantizer.h) with one float32 absmax scale per block of kCutInt8Block
// values of the message (rows x cols, row-major): 1 byte per value plus a 4-byte scale per
// kCutInt8Block values. int8's error per value is at most max|x in its block| / 254 (plus float rounding).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fedmesh::vertical {

enum class CutWire : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kInt8 = 3 };
inline constexpr CutWire kLastCutWire = CutWire::kInt8;
// Values per int8 scale: the codec chain's default block.
inline constexpr uint32_t kCutInt8Block = 256;

// "float32", "fp16", "bf16", "int8".
const char* CutWireName(CutWire w);
// The wire a [split] compression names: "none" (float32), "fp16", "bf16", "int8".
// InvalidArgument for anything else.
Result<CutWire> CutWireOfCompression(std::string_view compression);
// Bytes `count` values take on the wire.
uint64_t CutWireBytes(CutWire w, uint64_t count);

// `values` into `out` (resized to CutWireBytes). InvalidArgument when a value is not finite
// or does not fit (an fp16 overflow).
Status EncodeCutValues(CutWire w, std::span<const float> values, std::string& out);
// `in` into `out` (out.size() values). Corruption when `in` is not CutWireBytes(w,
// out.size()) bytes or holds an invalid int8 scale.
Status DecodeCutValues(CutWire w, std::string_view in, std::span<float> out);

}  // namespace fedmesh::vertical
