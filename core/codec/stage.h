// The three kinds of stage a codec chain (core/codec/codec.h) is built from, one interface
// each; every stage is a small immutable object with its parameters, and works on a whole
// vector per call (no per-element virtual calls). Implementations: sparsifiers in
// top_k.h / rand_k.h, quantizers in float32_quantizer.h / half_float_quantizer.h /
// int8_quantizer.h / qsgd_quantizer.h, the compressor in zstd_compressor.h.
// Thread-safety: stages are immutable; every method is safe to call concurrently.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/codec/byte_io.h"
#include "core/status.h"

namespace fedmesh::codec {

// Picks which coordinates of a dense vector are sent. The payload holds its index section
// (written by Select, read by ReadIndices) followed by the kept values, quantized.
class Sparsifier {
 public:
  virtual ~Sparsifier() = default;
  virtual std::string name() const = 0;  // canonical, e.g. "topk:0.01"
  virtual bool unbiased() const = 0;
  // Coordinates kept out of `n`; the decoder derives it the same way.
  virtual uint64_t KeptCount(uint64_t n) const = 0;
  // Largest index section for `n` coordinates.
  virtual uint64_t MaxIndexBytes(uint64_t n) const = 0;
  // Appends the index section for `x` to *out and sets *values to the KeptCount(x.size())
  // values to send, in increasing index order (already rescaled where the stage rescales).
  // InvalidArgument for a non-finite value. REQUIRES: x.size() < 2^32.
  virtual Status Select(std::span<const float> x, uint64_t seed, ByteWriter* out,
                        std::vector<float>* values) const = 0;
  // Appends the index section Select writes when it keeps `indices` (increasing, < 2^32),
  // for encoders that select elsewhere (Chain::EncodeParts). Unimplemented for a stage whose
  // section is not its indices (randk sends its seed).
  virtual Status WriteIndices(std::span<const uint32_t> indices, ByteWriter* out) const = 0;
  // Reads the index section for `n` coordinates into *indices: KeptCount(n) entries,
  // strictly increasing, each < n. Corruption otherwise.
  virtual Status ReadIndices(ByteReader* in, uint64_t n, std::vector<uint32_t>* indices) const = 0;
};

// Turns float32 values into bytes of a size fixed by the count (and back).
class Quantizer {
 public:
  virtual ~Quantizer() = default;
  virtual std::string name() const = 0;  // canonical, e.g. "int8:256"
  virtual bool lossless() const { return false; }
  virtual bool unbiased() const { return false; }
  // Exact encoded size of `count` values.
  virtual uint64_t EncodedBytes(uint64_t count) const = 0;
  // Writes EncodedBytes(values.size()) bytes to `out`. InvalidArgument when a value is not
  // finite or not representable.
  virtual Status Encode(std::span<const float> values, uint64_t seed, uint8_t* out) const = 0;
  // REQUIRES: in.size() == EncodedBytes(out.size()). Corruption when a scale, norm or code
  // is invalid; every value written is finite.
  virtual Status Decode(std::span<const uint8_t> in, std::span<float> out) const = 0;
};

// Lossless byte-to-byte stage at the end of a chain.
class Compressor {
 public:
  virtual ~Compressor() = default;
  virtual std::string name() const = 0;  // canonical, e.g. "zstd:3"
  // Largest output for `n` input bytes.
  virtual uint64_t MaxCompressedBytes(uint64_t n) const = 0;
  virtual Status Compress(std::span<const uint8_t> in, std::vector<uint8_t>* out) const = 0;
  // Corruption when `in` is not one complete frame, or declares more than max_bytes.
  virtual Status Decompress(std::span<const uint8_t> in, uint64_t max_bytes,
                            std::vector<uint8_t>* out) const = 0;
};

}  // namespace fedmesh::codec
