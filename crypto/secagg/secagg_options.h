// SecAggOptions: the settings of one secure aggregation round, which the server and every
// client must share exactly (a client with other settings derives another graph, other
// thresholds or another encoding, and its messages are refused or its sum is wrong).
// The round engine fills it from its config; Validate() is called by both factories.
// Thread-safety: a plain value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "crypto/secagg/fixed_point.h"

namespace fedmesh {

// Longest update vector a round accepts (coordinates): 2^28 words is 1 GiB per masked
// input, beyond any model fedmesh trains, and keeps a hostile vector_size from asking for
// absurd allocations.
inline constexpr size_t kMaxSecAggVectorSize = size_t{1} << 28;

struct SecAggOptions {
  // The federation this round belongs to; bound into every signature and ciphertext.
  // Required (no default).
  std::string federation_id;
  // The round number; bound like federation_id, so keys and shares of one round are
  // useless in another. Default 0.
  uint64_t round = 0;
  // Shamir threshold t: how many of a client's neighbours must return shares to rebuild
  // one of its secrets. 0 (the default) = DefaultSecAggThreshold(degree), i.e.
  // ceil(k/2) + 1. An explicit value must satisfy k/2 < t <= k for the round's degree k.
  uint32_t threshold = 0;
  // Graph degree k: how many neighbours each client shares with and masks against.
  // 0 (the default) = DefaultSecAggNeighbours(n) = 2 * ceil(log2 n) for a roster of n.
  // An explicit value must be even and <= 254; k >= n - 1 gives the complete graph
  // (plain Bonawitz et al.).
  uint32_t neighbours = 0;
  // Fixed-point encoding: L2 bound C and bits per coordinate (see fixed_point.h).
  // Defaults 1.0 and 16.
  double clip = 1.0;
  uint32_t bits = 16;
  // Distributed DP: Gaussian noise each client adds to its encoded update before masking,
  // standard deviation in update units (fixed_point.h AddEncodedNoise). Default 0: none.
  double noise_stddev = 0.0;
  // Coordinates in every update. Required: in [1, kMaxSecAggVectorSize].
  size_t vector_size = 0;
  // Smallest number of clients the round may aggregate: the server will not close
  // AdvertiseKeys, ShareKeys or MaskedInput with fewer, and a client refuses a roster or
  // a survivor set smaller than this, since the sum of very few updates says too much about
  // each. Default 3; at least 2.
  size_t min_clients = 3;
  // Largest number of clients whose updates may be summed, for the overflow bound of the
  // fixed-point encoding. 0 (the default) = the size of the allowlist the client or server
  // is created with.
  uint64_t max_clients = 0;

  // OK when the options are usable; InvalidArgument naming the field otherwise. With
  // max_clients == 0 the overflow bound is checked later, when the allowlist is known.
  Status Validate() const;

  // The encoding settings, with max_clients resolved to `allowlist_size` if it is 0.
  FixedPointOptions fixed_point(size_t allowlist_size) const;
};

// Degree and threshold of a round with a roster of n clients.
struct SecAggGraphParameters {
  uint32_t degree = 0;  // requested degree; the graph caps it at n - 1
  uint32_t threshold = 0;
};

// Resolves the defaults for a roster of n. FailedPrecondition when the roster is too small
// for these options: fewer than min_clients, or fewer neighbours per client than the
// threshold (so no secret could ever be rebuilt); InvalidArgument when an explicit
// threshold is at most half the degree.
Result<SecAggGraphParameters> ResolveGraphParameters(const SecAggOptions& options, size_t n);

}  // namespace fedmesh
