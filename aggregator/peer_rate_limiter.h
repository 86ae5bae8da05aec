// PeerRateLimiter: a token bucket per peer, so that a cheap message cannot make the
// aggregator do costly work without bound (a Register costs a store transaction and a
// reply; a rejected message costs a decode, a reply and a log line). Each peer holds up to
// `burst` tokens, refilled at `per_second`; Allow takes one or says no. Peers idle long
// enough to be full again are forgotten, so the table holds only recently active peers.
//
// Thread-safety: none (the aggregator's event loop).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace fedmesh {

struct PeerRateLimitOptions {
  // Tokens a peer starts with and may save up. Default: 5.
  double burst = 5.0;
  // Tokens added per second. Default: 0.5 (one every two seconds).
  double per_second = 0.5;
};

class PeerRateLimiter {
 public:
  explicit PeerRateLimiter(PeerRateLimitOptions options = {}) : options_(options) {}

  // Takes a token from `peer` at time `now` (seconds, any monotonic origin); false when it
  // has none (the caller drops the message and counts it).
  bool Allow(const std::string& peer, double now);
  // Whether `peer` has a token at `now`, taking none.
  bool HasToken(const std::string& peer, double now) const;
  // Messages refused since construction.
  uint64_t refused() const { return refused_; }

 private:
  struct Bucket {
    double tokens = 0.0;
    double at = 0.0;  // when `tokens` was last brought up to date
  };
  PeerRateLimitOptions options_;
  std::map<std::string, Bucket> buckets_;
  uint64_t refused_ = 0;
  double next_sweep_ = 0.0;
};

}  // namespace fedmesh
