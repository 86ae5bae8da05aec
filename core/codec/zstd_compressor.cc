#include "core/codec/zstd_compressor.h"

#include <zstd.h>

#include <memory>

namespace fedmesh::codec {
namespace {

struct CCtxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxFree {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

// Contexts hold megabytes of tables; one per thread, reused across calls.
ZSTD_CCtx* ThreadCCtx() {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxFree> ctx(ZSTD_createCCtx());
  return ctx.get();
}
ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxFree> ctx(ZSTD_createDCtx());
  return ctx.get();
}

}  // namespace

uint64_t ZstdCompressor::MaxCompressedBytes(uint64_t n) const {
  // ZSTD_COMPRESSBOUND: n + n/256 + a small margin; computed here to stay in 64 bits.
  return n + (n >> 8) + 64 + ((n < (128u << 10)) ? (((128u << 10) - n) >> 11) : 0);
}

Status ZstdCompressor::Compress(std::span<const uint8_t> in, std::vector<uint8_t>* out) const {
  ZSTD_CCtx* ctx = ThreadCCtx();
  if (ctx == nullptr) return Status::Internal("zstd: out of memory for a compression context");
  out->resize(ZSTD_compressBound(in.size()));
  const size_t r = ZSTD_compressCCtx(ctx, out->data(), out->size(), in.data(), in.size(), level_);
  if (ZSTD_isError(r)) {
    return Status::Internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(r));
  }
  out->resize(r);
  return Status::OK();
}

Status ZstdCompressor::Decompress(std::span<const uint8_t> in, uint64_t max_bytes,
                                  std::vector<uint8_t>* out) const {
  const size_t frame = ZSTD_findFrameCompressedSize(in.data(), in.size());
  if (ZSTD_isError(frame)) {
    return Status::Corruption(std::string("zstd payload is not a complete zstd frame: ") +
                              ZSTD_getErrorName(frame));
  }
  if (frame != in.size()) {
    return Status::Corruption("zstd payload holds " + std::to_string(in.size() - frame) +
                              " bytes after its frame; exactly one frame is allowed");
  }
  const unsigned long long size = ZSTD_getFrameContentSize(in.data(), in.size());
  if (size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR) {
    return Status::Corruption("zstd frame does not declare its content size");
  }
  if (size > max_bytes) {
    return Status::Corruption("zstd frame declares " + std::to_string(size) +
                              " bytes but the chain produces at most " +
                              std::to_string(max_bytes) + " for this element count");
  }
  ZSTD_DCtx* ctx = ThreadDCtx();
  if (ctx == nullptr) return Status::Internal("zstd: out of memory for a decompression context");
  out->resize(static_cast<size_t>(size));
  const size_t r = ZSTD_decompressDCtx(ctx, out->data(), out->size(), in.data(), in.size());
  if (ZSTD_isError(r)) {
    return Status::Corruption(std::string("zstd frame does not decompress: ") +
                              ZSTD_getErrorName(r));
  }
  if (r != size) {
    return Status::Corruption("zstd frame declared " + std::to_string(size) + " bytes but held " +
                              std::to_string(r));
  }
  return Status::OK();
}

}  // namespace fedmesh::codec
