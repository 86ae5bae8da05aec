// RingLiveness: SWIM failure detection for an all-reduce group (docs/collectives.md,
// "Failure detection"). Each member runs gossip's Membership (gossip/membership.h: direct
// probes, indirect probes through k others, suspicion, refutation) on a thread of its own,
// over a transport of its own beside the ring's (CurveZMQ between the group's keys, one
// port above the ring's), so a member keeps answering probes while it computes and a dead
// one is declared dead within about probe_interval_s + suspicion_timeout_s whatever the
// ring is doing. The elastic ring asks Dead(member) (ElasticOptions::dead): an operation
// then stops waiting for a dead member at once, and a re-forming closes as soon as every
// member not declared dead has answered. A restarted member is alive again as soon as the
// others hear from it (its record's incarnation is raised past the death notice).
// Thread-safety: Dead() and dead_count() from any thread; the rest from the owner's.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective/collective_transport.h"
#include "core/env.h"
#include "core/status.h"
#include "crypto/identity.h"
#include "gossip/membership.h"

namespace fedmesh {

struct RingLivenessOptions {
  // SWIM's timing (probe interval, probe timeout, suspicion timeout, ...). Defaults: those of
  // MembershipOptions except a 0.5 s probe interval, a 0.2 s probe timeout and a 1.5 s
  // suspicion timeout: a dead member is declared dead within about 2 s.
  MembershipOptions swim = [] {
    MembershipOptions o;
    o.probe_interval_s = 0.5;
    o.probe_timeout_s = 0.2;
    o.suspicion_timeout_s = 1.5;
    o.sync_interval_s = 2.0;
    o.join_retry_s = 0.5;
    // A dead member stays dead until it is heard from again: the ring asks about it for as
    // long as the run lasts (the tombstone would otherwise go after 60 s).
    o.dead_retention_s = 1e9;
    return o;
  }();
  // Names the group in every record it signs. Required.
  std::string group_id;
};

// Where a member's SWIM listens: its ring endpoint with the port one higher.
// InvalidArgument unless `ring_endpoint` is tcp://HOST:PORT with PORT below 65535.
Result<std::string> SwimEndpoint(const std::string& ring_endpoint);

class RingLiveness {
 public:
  // `group`: every member's public identity, in member order (index = the ring's member id);
  // `me`: this member's index; `identity` its keys; `transport` carries only SWIM messages
  // and addresses members by index (REQUIRES: identity and transport outlive this object).
  // Starts the thread.
  // InvalidArgument for bad options or a group that does not list `identity` at `me`.
  static Result<std::unique_ptr<RingLiveness>> Start(const RingLivenessOptions& options, const Identity& identity,
                                                     std::vector<PublicIdentity> group, int me,
                                                     collective::CollectiveTransport* transport);
  ~RingLiveness();  // stops the thread

  // Whether SWIM has declared `member` dead (and no word from it since).
  bool Dead(int member) const;
  // Members declared dead at some point, for logs and tests.
  uint64_t deaths() const { return deaths_.load(); }

 private:
  RingLiveness() = default;
  void Run();
  void Publish();

  RingLivenessOptions options_;
  std::vector<std::string> ids_;  // member index -> id
  int me_ = 0;
  collective::CollectiveTransport* transport_ = nullptr;
  std::unique_ptr<SystemEnv> env_;
  std::unique_ptr<Membership> membership_;
  std::string federation_;
  uint64_t sequence_ = 0;

  mutable std::mutex mu_;
  std::vector<bool> dead_;  // guarded by mu_
  std::atomic<uint64_t> deaths_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fedmesh
