#include "core/codec/codec.h"

#include <charconv>
#include <cmath>
#include <limits>

#include "core/codec/float32_quantizer.h"
#include "core/codec/half_float_quantizer.h"
#include "core/codec/int8_quantizer.h"
#include "core/codec/qsgd_quantizer.h"
#include "core/codec/rand_k.h"
#include "core/codec/stage.h"
#include "core/codec/top_k.h"
#include "core/codec/zstd_compressor.h"
#include "core/rng.h"
#include "core/split.h"

namespace fedmesh::codec {
namespace {

constexpr std::string_view kKnownStages =
    "topk:<ratio>, randk:<ratio>, fp16, bf16, int8[:block], qsgd:<levels>[:bucket], "
    "zstd[:level]";

// Element counts beyond this make every size computation saturate; no wire limit allows
// them (WireLimits::max_elements is at most 2^30 by default).
constexpr uint64_t kMaxCount = uint64_t{1} << 40;

Status BadStage(std::string_view chain, std::string_view stage, const std::string& why) {
  return Status::InvalidArgument("codec chain \"" + std::string(chain) + "\": stage \"" +
                                 std::string(stage) + "\" " + why);
}

// Parses an integer parameter in [lo, hi].
Status ParseInt(std::string_view chain, std::string_view stage, std::string_view text,
                const char* what, int64_t lo, int64_t hi, int64_t* v) {
  int64_t r = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), r);
  if (ec != std::errc() || p != text.data() + text.size() || r < lo || r > hi) {
    return BadStage(chain, stage,
                    "has " + std::string(what) + " \"" + std::string(text) +
                        "\"; it must be an integer in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "]");
  }
  *v = r;
  return Status::OK();
}

Status ParseRatio(std::string_view chain, std::string_view stage, std::string_view text,
                  double* v) {
  double r = 0.0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), r);
  if (ec != std::errc() || p != text.data() + text.size() || !std::isfinite(r) || r <= 0.0 ||
      r > 1.0) {
    return BadStage(chain, stage,
                    "has ratio \"" + std::string(text) + "\"; it must be a number in (0, 1]");
  }
  *v = r;
  return Status::OK();
}

uint64_t SatAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                       : a + b;
}

// Per-thread scratch for the bytes between the quantizer and the compressor.
std::vector<uint8_t>& Scratch() {
  thread_local std::vector<uint8_t> buf;
  return buf;
}

}  // namespace

Chain::Chain() : name_(kNone), quantizer_(std::make_shared<Float32Quantizer>()) {}

Result<Chain> Chain::Parse(std::string_view text) {
  Chain c;
  if (text.empty() || text == kNone) return c;
  std::shared_ptr<const Quantizer> quantizer;
  int last_rank = -1;
  std::string_view last_stage;
  for (std::string_view stage : Split(text, '|')) {
    const std::vector<std::string_view> args = Split(stage, ':');
    const std::string_view kind = args[0];
    const size_t params = args.size() - 1;
    int rank = 0;  // 0 sparsifier, 1 quantizer, 2 compressor
    if (kind == "topk" || kind == "randk") {
      if (params != 1) {
        return BadStage(text, stage, "needs exactly one parameter, the kept ratio, e.g. " +
                                         std::string(kind) + ":0.01");
      }
      double ratio = 0.0;
      FM_RETURN_IF_ERROR(ParseRatio(text, stage, args[1], &ratio));
      if (kind == "topk") {
        c.sparsifier_ = std::make_shared<TopKSparsifier>(ratio);
      } else {
        c.sparsifier_ = std::make_shared<RandKSparsifier>(ratio);
      }
      rank = 0;
    } else if (kind == "fp16" || kind == "bf16") {
      if (params != 0) return BadStage(text, stage, "takes no parameters");
      if (kind == "fp16") {
        quantizer = std::make_shared<Fp16Quantizer>();
      } else {
        quantizer = std::make_shared<Bf16Quantizer>();
      }
      rank = 1;
    } else if (kind == "int8") {
      if (params > 1) return BadStage(text, stage, "takes one parameter, the block size");
      int64_t block = Int8Quantizer::kDefaultBlock;
      if (params == 1) {
        FM_RETURN_IF_ERROR(
            ParseInt(text, stage, args[1], "block size", 1, Int8Quantizer::kMaxBlock, &block));
      }
      quantizer = std::make_shared<Int8Quantizer>(static_cast<uint32_t>(block));
      rank = 1;
    } else if (kind == "qsgd") {
      if (params < 1 || params > 2) {
        return BadStage(text, stage, "needs the number of levels and optionally the bucket "
                                     "size, e.g. qsgd:8 or qsgd:8:512");
      }
      int64_t levels = 0, bucket = QsgdQuantizer::kDefaultBucket;
      FM_RETURN_IF_ERROR(
          ParseInt(text, stage, args[1], "levels", 1, QsgdQuantizer::kMaxLevels, &levels));
      if (params == 2) {
        FM_RETURN_IF_ERROR(
            ParseInt(text, stage, args[2], "bucket size", 1, QsgdQuantizer::kMaxBucket, &bucket));
      }
      quantizer = std::make_shared<QsgdQuantizer>(static_cast<uint32_t>(levels),
                                                  static_cast<uint32_t>(bucket));
      rank = 1;
    } else if (kind == "zstd") {
      if (params > 1) return BadStage(text, stage, "takes one parameter, the level");
      int64_t level = ZstdCompressor::kDefaultLevel;
      if (params == 1) {
        FM_RETURN_IF_ERROR(
            ParseInt(text, stage, args[1], "level", 1, ZstdCompressor::kMaxLevel, &level));
      }
      c.compressor_ = std::make_shared<ZstdCompressor>(static_cast<int>(level));
      rank = 2;
    } else if (kind == kNone) {
      return BadStage(text, stage, "cannot be combined with other stages; \"none\" stands alone");
    } else {
      return BadStage(text, stage, "is unknown; known stages: " + std::string(kKnownStages));
    }
    if (rank <= last_rank) {
      static constexpr const char* kRankName[] = {"a sparsifier", "a quantizer", "zstd"};
      return BadStage(text, stage,
                      rank == last_rank
                          ? std::string("repeats ") + kRankName[rank] + "; a chain has at most one"
                          : "must come before \"" + std::string(last_stage) +
                                "\" (order: sparsifier, quantizer, zstd)");
    }
    last_rank = rank;
    last_stage = stage;
  }
  if (quantizer != nullptr) c.quantizer_ = std::move(quantizer);
  std::string name;
  if (c.sparsifier_) name = c.sparsifier_->name();
  if (!c.quantizer_->lossless()) name += (name.empty() ? "" : "|") + c.quantizer_->name();
  if (c.compressor_) name += (name.empty() ? "" : "|") + c.compressor_->name();
  c.name_ = std::move(name);
  return c;
}

bool Chain::lossless() const { return sparsifier_ == nullptr && quantizer_->lossless(); }

bool Chain::unbiased() const {
  return (sparsifier_ == nullptr || sparsifier_->unbiased()) && quantizer_->unbiased();
}

uint64_t Chain::MaxUncompressedBytes(uint64_t count) const {
  if (count > kMaxCount) return std::numeric_limits<uint64_t>::max();
  if (sparsifier_ == nullptr) return quantizer_->EncodedBytes(count);
  return SatAdd(sparsifier_->MaxIndexBytes(count),
                quantizer_->EncodedBytes(sparsifier_->KeptCount(count)));
}

uint64_t Chain::MaxEncodedBytes(uint64_t count) const {
  const uint64_t raw = MaxUncompressedBytes(count);
  if (compressor_ == nullptr || raw == std::numeric_limits<uint64_t>::max()) return raw;
  return compressor_->MaxCompressedBytes(raw);
}

Status Chain::CheckCount(uint64_t n) const {
  if (n > kMaxCount) {
    return Status::InvalidArgument("codec chains encode at most 2^40 values, got " +
                                   std::to_string(n));
  }
  if (sparsifier_ != nullptr && n > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument(sparsifier_->name() + " handles at most 2^32 - 1 values, got " +
                                   std::to_string(n));
  }
  return Status::OK();
}

template <typename F>
Status Chain::EncodeThenCompress(const F& encode, std::vector<uint8_t>* out) const {
  if (compressor_ == nullptr) return encode(out);
  std::vector<uint8_t>& raw = Scratch();
  FM_RETURN_IF_ERROR(encode(&raw));
  return compressor_->Compress(raw, out);
}

Status Chain::EncodeUncompressed(std::span<const float> values, uint64_t seed,
                                 std::vector<uint8_t>* out) const {
  // Stages draw from independent streams of the one seed.
  const uint64_t quantizer_seed = SplitMix64(seed ^ 0x51D5EEDull);
  if (sparsifier_ == nullptr) {
    out->resize(quantizer_->EncodedBytes(values.size()));
    return quantizer_->Encode(values, quantizer_seed, out->data());
  }
  out->clear();
  ByteWriter w(out);
  std::vector<float> kept;
  FM_RETURN_IF_ERROR(sparsifier_->Select(values, seed, &w, &kept));
  uint8_t* p = w.Extend(quantizer_->EncodedBytes(kept.size()));
  return quantizer_->Encode(kept, quantizer_seed, p);
}

Status Chain::Encode(std::span<const float> values, uint64_t seed,
                     std::vector<uint8_t>* out) const {
  FM_RETURN_IF_ERROR(CheckCount(values.size()));
  return EncodeThenCompress(
      [&](std::vector<uint8_t>* raw) { return EncodeUncompressed(values, seed, raw); }, out);
}

Status Chain::EncodePartsUncompressed(uint64_t n, std::span<const uint32_t> kept,
                                      const std::function<Status(std::span<uint8_t>)>& write_values,
                                      std::vector<uint8_t>* out) const {
  out->clear();
  ByteWriter w(out);
  uint64_t m = n;
  if (sparsifier_ != nullptr) {
    FM_RETURN_IF_ERROR(sparsifier_->WriteIndices(kept, &w));
    m = kept.size();
  }
  const uint64_t bytes = quantizer_->EncodedBytes(m);
  return write_values(std::span<uint8_t>(w.Extend(bytes), bytes));
}

Status Chain::EncodeParts(uint64_t n, std::span<const uint32_t> kept,
                          const std::function<Status(std::span<uint8_t>)>& write_values,
                          std::vector<uint8_t>* out) const {
  FM_RETURN_IF_ERROR(CheckCount(n));
  const uint64_t want = sparsifier_ != nullptr ? sparsifier_->KeptCount(n) : 0;
  if (kept.size() != want) {
    return Status::InvalidArgument(name_ + " keeps " + std::to_string(want) + " of " +
                                   std::to_string(n) + " values, but " +
                                   std::to_string(kept.size()) + " kept indices were given");
  }
  for (size_t j = 0; j < kept.size(); ++j) {
    if (kept[j] >= n || (j > 0 && kept[j] <= kept[j - 1])) {
      return Status::InvalidArgument(
          name_ + ": kept index " + std::to_string(j) + " is " + std::to_string(kept[j]) +
          "; kept indices must be increasing and below " + std::to_string(n));
    }
  }
  return EncodeThenCompress(
      [&](std::vector<uint8_t>* raw) {
        return EncodePartsUncompressed(n, kept, write_values, raw);
      },
      out);
}

Status Chain::DecodeUncompressed(std::span<const uint8_t> bytes, std::span<float> out) const {
  const uint64_t n = out.size();
  if (sparsifier_ == nullptr) {
    const uint64_t want = quantizer_->EncodedBytes(n);
    if (bytes.size() != want) {
      return Status::Corruption(name_ + " payload of " + std::to_string(n) + " values must be " +
                                std::to_string(want) + " bytes, got " +
                                std::to_string(bytes.size()));
    }
    return quantizer_->Decode(bytes, out);
  }
  if (n > std::numeric_limits<uint32_t>::max()) {
    return Status::Corruption(sparsifier_->name() + " payload declares " + std::to_string(n) +
                              " values; sparsifiers handle at most 2^32 - 1");
  }
  ByteReader r(bytes);
  std::vector<uint32_t> indices;
  FM_RETURN_IF_ERROR(sparsifier_->ReadIndices(&r, n, &indices));
  const uint64_t want = quantizer_->EncodedBytes(indices.size());
  if (r.remaining() != want) {
    return Status::Corruption(name_ + " value section for " + std::to_string(indices.size()) +
                              " kept values must be " + std::to_string(want) + " bytes, got " +
                              std::to_string(r.remaining()));
  }
  std::vector<float> kept(indices.size());
  FM_RETURN_IF_ERROR(quantizer_->Decode(r.Rest(), kept));
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t j = 0; j < indices.size(); ++j) out[indices[j]] = kept[j];
  return Status::OK();
}

Status Chain::Decode(std::span<const uint8_t> bytes, std::span<float> out) const {
  if (out.size() > kMaxCount) {
    return Status::Corruption("payload declares " + std::to_string(out.size()) +
                              " values; codec chains decode at most 2^40");
  }
  if (compressor_ == nullptr) return DecodeUncompressed(bytes, out);
  const uint64_t raw_max = MaxUncompressedBytes(out.size());
  if (bytes.size() > compressor_->MaxCompressedBytes(raw_max)) {
    return Status::Corruption(name_ + " payload of " + std::to_string(bytes.size()) +
                              " bytes is larger than the chain produces for " +
                              std::to_string(out.size()) + " values");
  }
  std::vector<uint8_t> raw;
  FM_RETURN_IF_ERROR(compressor_->Decompress(bytes, raw_max, &raw));
  return DecodeUncompressed(raw, out);
}

}  // namespace fedmesh::codec
