#include "storage/float_blob.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>

namespace fedmesh {
namespace {

constexpr bool kLittleEndian = std::endian::native == std::endian::little;
static_assert(sizeof(float) == 4 && std::numeric_limits<float>::is_iec559,
              "fedmesh stores IEEE-754 float32");

// Reads are hashed chunk by chunk while the chunk is still in cache.
constexpr size_t kReadChunkBytes = size_t{4} << 20;

void SwapBytes(std::span<uint8_t> bytes) {
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    std::swap(bytes[i], bytes[i + 3]);
    std::swap(bytes[i + 1], bytes[i + 2]);
  }
}

// The stored bytes of `values`: a view on little-endian hosts, a swapped copy otherwise.
std::span<const uint8_t> StoredBytes(std::span<const float> values, std::vector<uint8_t>& scratch) {
  const auto* raw = reinterpret_cast<const uint8_t*>(values.data());
  const std::span<const uint8_t> bytes(raw, values.size_bytes());
  if constexpr (kLittleEndian) {
    return bytes;
  } else {
    scratch.assign(bytes.begin(), bytes.end());
    SwapBytes(scratch);
    return scratch;
  }
}

std::string ShortHex(std::span<const uint8_t> digest) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < std::min<size_t>(digest.size(), 8); ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out + "...";
}

Status Damaged(const Database& db, std::string_view what, const std::string& detail) {
  return Status::Corruption(db.path() + ": " + std::string(what) + " is damaged (" + detail +
                            "); it was not loaded. Restore the file from a backup, or move it "
                            "aside to start from an empty store");
}

}  // namespace

std::vector<uint8_t> StoredDigestOf(std::span<const float> values, wire::DigestKind kind) {
  std::vector<uint8_t> scratch;
  const wire::PayloadDigest d = wire::HashPayload(kind, StoredBytes(values, scratch));
  std::vector<uint8_t> out;
  if (kind != wire::DigestKind::kSha256) out.push_back(static_cast<uint8_t>(kind));
  out.insert(out.end(), d.bytes.begin(), d.bytes.end());
  return out;
}

Status WriteFloatBlob(Database& db, std::string_view table, std::string_view column, int64_t rowid,
                      std::span<const float> values) {
  if (values.empty()) return Status::OK();
  FM_ASSIGN_OR_RETURN(Blob blob, db.OpenBlob(table, column, rowid, /*writable=*/true));
  if (blob.size() != values.size_bytes()) {
    return Status::Internal("blob " + std::string(table) + "." + std::string(column) + " of row " +
                            std::to_string(rowid) + " on " + db.path() + " holds " +
                            std::to_string(blob.size()) + " bytes, expected " +
                            std::to_string(values.size_bytes()));
  }
  std::vector<uint8_t> scratch;
  return blob.Write(0, StoredBytes(values, scratch));
}

Result<std::vector<float>> ReadFloatBlob(Database& db, std::string_view table,
                                         std::string_view column, int64_t rowid,
                                         uint64_t num_values,
                                         std::span<const uint8_t> stored_digest,
                                         std::string_view what) {
  constexpr size_t kDigestBytes = std::tuple_size_v<decltype(wire::PayloadDigest::bytes)>;
  wire::DigestKind kind = wire::DigestKind::kSha256;
  std::span<const uint8_t> expected_digest = stored_digest;
  if (stored_digest.size() == 1 + kDigestBytes &&
      stored_digest[0] == static_cast<uint8_t>(wire::DigestKind::kBlake3)) {
    kind = wire::DigestKind::kBlake3;
    expected_digest = stored_digest.subspan(1);
  } else if (stored_digest.size() != kDigestBytes) {
    return Damaged(db, what,
                   "its stored digest is " + std::to_string(stored_digest.size()) +
                       " bytes, neither a SHA-256 (32) nor a tagged BLAKE3 (33)");
  }
  const std::string kind_name(wire::DigestKindName(kind));
  // The blob's real length bounds the allocation: a damaged count cannot ask for terabytes.
  Result<Blob> opened = db.OpenBlob(table, column, rowid, /*writable=*/false);
  if (!opened.ok()) {
    // A NULL value cannot be opened as a blob; report it as damage, not as a SQL error.
    return Damaged(db, what, "its values cannot be read: " + opened.status().message());
  }
  Blob blob = std::move(opened).value();
  if (num_values > blob.size() / sizeof(float) || blob.size() != num_values * sizeof(float)) {
    return Damaged(db, what,
                   "expected " + std::to_string(num_values) + " float32 values (" +
                       std::to_string(num_values * 4) + " bytes), found " +
                       std::to_string(blob.size()) + " bytes");
  }
  std::vector<float> values(num_values);
  const std::span<uint8_t> bytes(reinterpret_cast<uint8_t*>(values.data()), values.size() * 4);
  wire::PayloadHasher hasher(kind);
  for (size_t off = 0; off < bytes.size(); off += kReadChunkBytes) {
    const std::span<uint8_t> chunk =
        bytes.subspan(off, std::min(kReadChunkBytes, bytes.size() - off));
    FM_RETURN_IF_ERROR(blob.Read(off, chunk));
    hasher.Update(chunk);
  }
  const wire::PayloadDigest got = hasher.Finish();
  if (!std::equal(got.bytes.begin(), got.bytes.end(), expected_digest.begin())) {
    return Damaged(db, what,
                   "the " + kind_name + " of its values is " + ShortHex(got.bytes) + " but " +
                       ShortHex(expected_digest) + " was stored with them");
  }
  if constexpr (!kLittleEndian) SwapBytes(bytes);
  return values;
}

}  // namespace fedmesh
