// Codec chains meet the wire: a flat float32 vector encoded into a wire::TensorPayload
// (the chain's canonical name in payload.codec) and any received payload decoded back to
// dense float32, whatever chain its header names. The receiver's side of the hostile-input
// rules: the chain name must parse, dtype must be float32, and the declared byte count
// must not exceed what the chain can produce for the declared element count (checked
// before anything is allocated); then the chain's own decoder validates the bytes.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/codec/codec.h"
#include "core/status.h"
#include "core/wire/messages.h"

namespace fedmesh::codec {

// `values` encoded with `chain` (seeded by `seed` for stochastic stages), flat (no shapes).
Result<wire::TensorPayload> EncodePayload(const Chain& chain, std::span<const float> values,
                                          uint64_t seed);

// A payload whose bytes are already encoded with `chain` (e.g. by ErrorFeedback).
wire::TensorPayload MakePayload(const Chain& chain, uint64_t element_count,
                                std::vector<uint8_t> bytes);

// Decodes any payload to dense float32 (element_count values, all finite).
// InvalidArgument for a bad header (as above); Corruption for bytes that do not decode.
Result<std::vector<float>> DecodePayload(const wire::TensorPayload& payload);

}  // namespace fedmesh::codec
