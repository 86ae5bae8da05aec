// Codec chains: how a flat float32 vector (a model update, a global model) becomes the bytes
// of a wire::TensorPayload and back. A chain is written as a string of stages joined by
// '|', e.g. "topk:0.01|int8|zstd", and always runs in this order, each part optional:
//
//   sparsifier   topk:<ratio>   exact top-k by magnitude, indices delta-encoded (varints)
//                randk:<ratio>  k indices drawn from a seed sent in the payload; values
//                               rescaled by n/k so the decoded vector is unbiased
//   quantizer    fp16 | bf16    IEEE half / bfloat16, round to nearest even
//                int8[:block]   per-block absmax scale (float32) + int8 values; block 256
//                qsgd:<levels>[:bucket]  QSGD (Alistarh et al. 2017): per-bucket L2 norm,
//                               unbiased stochastic rounding to `levels` levels; bucket 512
//   compressor   zstd[:level]   lossless zstd over the bytes of the stages before; level 3
//
// A sparsifier hands its kept values to the quantizer (float32 when there is none). The
// empty chain is "none": raw little-endian float32. Parse returns the canonical name, with
// every parameter written out ("topk:0.01|int8:256|zstd:3"); that name goes in the payload
// header, so any decoder rebuilds the chain from the header alone. The byte layout of every
// stage is in docs/codecs.md.
//
// Every decoder validates before it writes: section lengths against the element count,
// indices (in range, strictly increasing), scales and norms (finite, >= 0), quantized
// values (in range), zstd frames (one frame, declared size within the chain's bound). The
// decoded vector is always finite. Errors: InvalidArgument for a bad chain string or a
// non-finite / out-of-range input to Encode; Corruption for bytes that do not decode.
//
// Thread-safety: a Chain is immutable after Parse; Encode and Decode may be called from
// many threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fedmesh::codec {

class Sparsifier;
class Quantizer;
class Compressor;

// Name of the empty chain.
inline constexpr std::string_view kNone = "none";

class Chain {
 public:
  // The empty chain ("none").
  Chain();
  // Parses `text` ("none", "" and "topk:0.01|int8|zstd" style). InvalidArgument naming the
  // stage for an unknown stage, a bad parameter, or stages out of order / repeated.
  static Result<Chain> Parse(std::string_view text);

  // Canonical name: every parameter written out; Parse(name()) gives an equal chain.
  const std::string& name() const { return name_; }
  bool is_none() const { return name_ == kNone; }
  // Decode(Encode(x)) == x exactly ("none" and zstd only).
  bool lossless() const;
  // E[Decode(Encode(x))] == x over the seed (randk, qsgd, and lossless chains). Chains
  // that are lossy and biased (topk, fp16, bf16, int8) want error feedback on the sender.
  bool unbiased() const;
  bool has_sparsifier() const { return sparsifier_ != nullptr; }

  // Encodes `values` into *out (replacing its contents; its capacity is reused). `seed`
  // drives the stochastic stages (randk indices, qsgd rounding); the same seed gives the
  // same bytes. InvalidArgument when a value is not finite or cannot be represented (fp16
  // beyond 65504, bf16 rounding to infinity), or when a sparsifier gets more than 2^32 - 1
  // values.
  Status Encode(std::span<const float> values, uint64_t seed, std::vector<uint8_t>* out) const;

  // The size limits Encode checks first: InvalidArgument for more than 2^40 values, or
  // more than 2^32 - 1 with a sparsifier.
  Status CheckCount(uint64_t n) const;

  // Encode for callers that run the sparsifier and quantizer elsewhere (the CUDA codecs,
  // core/cuda/cuda_codecs.h): writes the sparsifier's index section for `kept`, the
  // KeptCount(n) indices it chose (increasing, < n; empty without a sparsifier), then has
  // `write_values` fill the value section, quantizer().EncodedBytes(m) bytes for the m
  // kept values (n without a sparsifier), then compresses. Equal parts give Encode's bytes.
  // InvalidArgument for a bad count or bad `kept`; Unimplemented for randk (its index
  // section is a seed); write_values's error as it is. write_values must not itself encode
  // on this thread: with zstd it writes into Encode's per-thread scratch buffer.
  Status EncodeParts(uint64_t n, std::span<const uint32_t> kept,
                     const std::function<Status(std::span<uint8_t>)>& write_values,
                     std::vector<uint8_t>* out) const;

  // The stages, for encoders that run them elsewhere. sparsifier() and compressor() are
  // null when the chain has none; quantizer() is a Float32Quantizer when none is named.
  const Sparsifier* sparsifier() const { return sparsifier_.get(); }
  const Quantizer& quantizer() const { return *quantizer_; }
  const Compressor* compressor() const { return compressor_.get(); }

  // Decodes `bytes` into `out`, whose size is the element count the header declared.
  // Corruption when the bytes are not what this chain produces for that many elements;
  // `out` may then hold partial results.
  Status Decode(std::span<const uint8_t> bytes, std::span<float> out) const;

  // Largest byte count Encode can produce for `count` values: a receiver rejects a payload
  // that declares more before it allocates anything.
  uint64_t MaxEncodedBytes(uint64_t count) const;

  friend bool operator==(const Chain& a, const Chain& b) { return a.name_ == b.name_; }

 private:
  // Size of the bytes before the compressor stage, at most.
  uint64_t MaxUncompressedBytes(uint64_t count) const;
  Status EncodeUncompressed(std::span<const float> values, uint64_t seed,
                            std::vector<uint8_t>* out) const;
  Status EncodePartsUncompressed(uint64_t n, std::span<const uint32_t> kept,
                                 const std::function<Status(std::span<uint8_t>)>& write_values,
                                 std::vector<uint8_t>* out) const;
  // Runs `encode` into *out, or into a scratch buffer compressed into *out.
  template <typename F>
  Status EncodeThenCompress(const F& encode, std::vector<uint8_t>* out) const;
  Status DecodeUncompressed(std::span<const uint8_t> bytes, std::span<float> out) const;

  std::string name_;
  std::shared_ptr<const Sparsifier> sparsifier_;  // null: dense
  std::shared_ptr<const Quantizer> quantizer_;    // never null; float32 when none is named
  std::shared_ptr<const Compressor> compressor_;  // null: none
};

}  // namespace fedmesh::codec
