#include "crypto/psi/ristretto_points.h"

#include <sodium.h>

#include <atomic>
#include <limits>

#include "crypto/sodium.h"

namespace fedmesh::psi {

Result<SecureBuffer> RandomScalar() {
  FM_RETURN_IF_ERROR(InitSodium());
  FM_ASSIGN_OR_RETURN(SecureBuffer s, SecureBuffer::Create(kScalarSize));
  crypto_core_ristretto255_scalar_random(s.data());  // never zero (libsodium's contract)
  return s;
}

std::vector<Point> HashIds(std::span<const std::string> ids) {
  (void)InitSodium();
  std::vector<Point> points(ids.size());
  const auto n = static_cast<int64_t>(ids.size());
#pragma omp parallel for schedule(static, 1024)
  for (int64_t i = 0; i < n; ++i) {
    const std::string& id = ids[static_cast<size_t>(i)];
    uint8_t digest[crypto_core_ristretto255_HASHBYTES];
    crypto_generichash_state st;
    crypto_generichash_init(&st, nullptr, 0, sizeof digest);
    const uint32_t dl = static_cast<uint32_t>(kIdHashDomain.size());
    const uint8_t dlen[4] = {static_cast<uint8_t>(dl), static_cast<uint8_t>(dl >> 8), static_cast<uint8_t>(dl >> 16),
                             static_cast<uint8_t>(dl >> 24)};
    crypto_generichash_update(&st, dlen, sizeof dlen);
    crypto_generichash_update(&st, reinterpret_cast<const uint8_t*>(kIdHashDomain.data()), kIdHashDomain.size());
    crypto_generichash_update(&st, reinterpret_cast<const uint8_t*>(id.data()), id.size());
    crypto_generichash_final(&st, digest, sizeof digest);
    crypto_core_ristretto255_from_hash(points[static_cast<size_t>(i)].data(), digest);
  }
  return points;
}

Status Blind(std::span<const uint8_t> scalar, std::span<Point> points) {
  if (scalar.size() != kScalarSize) return Status::InvalidArgument("psi: a scalar is 32 bytes");
  FM_RETURN_IF_ERROR(InitSodium());
  // The lowest failing index, whichever thread finds it.
  std::atomic<int64_t> bad{std::numeric_limits<int64_t>::max()};
  const auto n = static_cast<int64_t>(points.size());
#pragma omp parallel for schedule(static, 256)
  for (int64_t i = 0; i < n; ++i) {
    Point& p = points[static_cast<size_t>(i)];
    // crypto_scalarmult_ristretto255 refuses a non-canonical encoding and an identity result.
    if (crypto_scalarmult_ristretto255(p.data(), scalar.data(), p.data()) != 0) {
      int64_t cur = bad.load();
      while (i < cur && !bad.compare_exchange_weak(cur, i)) {
      }
    }
  }
  if (bad.load() != std::numeric_limits<int64_t>::max()) {
    return Status::InvalidArgument("psi: element " + std::to_string(bad.load()) +
                                   " is not a valid ristretto255 point (or is the identity)");
  }
  return Status::OK();
}

}  // namespace fedmesh::psi
