// Float values on a wire in one of the WireTypes (collective/chunk.h): float32 as is, or
// fp16 / bf16 at half the bytes. Shared by ring collectives and split training.
// Thread-safety: pure functions.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "collective/chunk.h"
#include "core/status.h"

namespace fedmesh::collective {

// The wire type a configuration's `compression` names: "none" (float32), "fp16", "bf16".
// InvalidArgument for anything else.
Result<WireType> WireTypeOfCompression(std::string_view compression);

// `values` in `wire` format into `out` (resized). InvalidArgument when a value does not fit
// the wire type (fp16 overflow) or the type is unknown.
Status EncodeWireFloats(WireType wire, std::span<const float> values, std::string& out);
// `in` (out.size() values in `wire` format) into `out`. REQUIRES: in.size() ==
// out.size() * WireBytes(wire).
Status DecodeWireFloats(WireType wire, std::string_view in, std::span<float> out);

}  // namespace fedmesh::collective
