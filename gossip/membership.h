// Membership: who is in the gossip network, as a sans-IO SWIM state machine (Das, Gupta and
// Motivala 2002, with memberlist's refinements). Each probe interval the node pings the
// next member of a shuffled round-robin list; without a direct Ack within the probe timeout
// it asks `indirect_probes` other members to ping the target for it (PingReq, relayed Ack);
// without any Ack by the end of the interval the target becomes suspect, and dead once the
// suspicion timeout passes unrefuted. State changes travel piggybacked on Ping/Ack/PingReq
// (infection-style, each retransmitted retransmit_mult * ceil(log2(n + 1)) times) and by a
// periodic full-view Sync with one random member (anti-entropy). A member that hears it is
// suspect or dead raises its incarnation and spreads "alive" (refutation). Newcomers Join
// through configured seeds and get the seed's whole view back as a Sync.
//
// Security: only ids in the allowlist, with exactly its keys, ever enter the view; a message
// from an id the transport did not map to the allowlist is refused (PermissionDenied). Every
// record is signed by the member it describes (gossip/signed_member.h) and refused unless
// that signature verifies against the allowlist: a member may spread, suspect or declare
// dead another member's record, but cannot move it to another endpoint or raise its
// incarnation. Incarnations above kMaxIncarnation are refused, so a refutation never wraps.
// A signature is checked only when the record would change something here, and not again
// for a record this node already holds, so a steady-state Sync costs no verification.
//
// Wire conventions of this implementation (core/wire/messages.h, wire::Membership):
//  - every message's updates[0] is the sender's own record (kJoin requires it). Since the
//    transport authenticated the sender, that record is first-hand evidence that it runs:
//    it revives a dead tombstone (a restarted node) and, signed at the incarnation the
//    receiver holds, gives the receiver its current endpoint.
//    The piggybacked updates (at most max_piggyback) follow it.
//  - kAck.target is the member that answered the Ping (relays keep it unchanged).
//  - kSync with probe_id != 0 is a periodic push-pull request: the receiver answers with
//    its own Sync (probe_id 0) when it knows something newer. A Sync with probe_id 0 (an
//    answer, or the answer to a Join) is never answered, so Syncs cannot ping-pong.
//
// The object does no I/O: the driver feeds OnMessage / OnTimer, ships TakeSends() to the
// addresses AddressOf() gives, and sleeps until NextTimerAt(). Time and randomness come only
// from the Env, so the simulator replays a run exactly from its seed.
// Thread-safety: not thread-safe; one thread of control (the driver's event loop) makes
// every call and owns the Env's rng() meanwhile.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/status.h"
#include "core/wire/messages.h"
#include "crypto/identity.h"
#include "gossip/signed_member.h"

namespace fedmesh {

struct MembershipOptions {
  // Seconds between probes; one member is probed per interval (SWIM's T). Default: 1.
  double probe_interval_s = 1.0;
  // Seconds to wait for a direct Ack before asking others to probe (PingReq). Default: 0.25.
  // Must be < probe_interval_s: the indirect probes need the rest of the interval.
  double probe_timeout_s = 0.25;
  // Members asked to PingReq the target (SWIM's k). Default: 3. Must be >= 1.
  uint32_t indirect_probes = 3;
  // Seconds a member stays suspect without refuting before it is declared dead. Default: 3.
  double suspicion_timeout_s = 3.0;
  // Each update is piggybacked retransmit_mult * ceil(log2(n + 1)) times, n the live
  // members including self. Default: 3. Must be >= 1.
  uint32_t retransmit_mult = 3;
  // Piggybacked updates per Ping/Ack/PingReq, besides the sender's own record. Default: 16.
  // Must be in [1, 4095] (the wire carries at most 4,096 updates).
  uint32_t max_piggyback = 16;
  // Seconds between full-view Syncs with one random live member. Default: 5.
  double sync_interval_s = 5.0;
  // Seconds between Joins to the seeds until the node is joined. Default: 1.
  double join_retry_s = 1.0;
  // Seconds a dead member's tombstone is kept (it blocks stale "alive" gossip). Default: 60.
  double dead_retention_s = 60.0;
};

// InvalidArgument naming the first offending field and its value. Every duration must be
// finite and > 0, probe_timeout_s < probe_interval_s, and the counts within the ranges above.
Status Validate(const MembershipOptions& options);

// A configured entry point: a member to Join through.
struct Seed {
  std::string id;
  std::string endpoint;
};

// Send `message` to the member `to` (an id; AddressOf says where it listens).
struct MembershipSend {
  std::string to;
  wire::Membership message;
};

// Where a member listens and the CurveZMQ key it must present.
struct Address {
  std::string endpoint;
  std::array<uint8_t, 32> curve_public{};
};

class Membership {
 public:
  // `identity`: this node's id and keys; it signs the node's own record, for
  // `federation_id`, at `endpoint` and `incarnation` (the driver restores the incarnation
  // from its checkpoint). `allowlist`: only these ids, with exactly these keys, are ever
  // admitted to the view, and their sign keys check every record. Seeds not in the
  // allowlist, and self, are ignored. InvalidArgument for bad options, an empty federation
  // or endpoint, an incarnation above kMaxIncarnation, an id listed twice in the allowlist,
  // or self not in the allowlist with its keys. REQUIRES: identity and env outlive the
  // object.
  static Result<std::unique_ptr<Membership>> Create(const MembershipOptions& options,
                                                    const Identity& identity,
                                                    std::string federation_id, std::string endpoint,
                                                    uint64_t incarnation,
                                                    std::vector<PublicIdentity> allowlist,
                                                    std::vector<Seed> seeds, Env& env);

  // A message from `from`, the id the transport authenticated. PermissionDenied (and
  // refused_count() + 1) when `from` is not allowlisted. Updates about ids outside the
  // allowlist, with other keys, above kMaxIncarnation, or without their member's valid
  // signature are skipped and each adds 1 to refused_count(); the rest of the message is
  // still used. InvalidArgument, with nothing applied, for content no
  // correct peer sends: a Join whose updates[0] is not the sender, a PingReq naming the
  // sender or nobody, an Ack naming nobody. Races a correct peer can cause (an Ack for a probe
  // already given up, a PingReq for a member not in this view) are ignored and return OK.
  Status OnMessage(const std::string& from, const wire::Membership& message);

  // Runs the timers due at env.NowSeconds(): join retries, probes and their timeouts,
  // suspicion expiry, tombstone expiry, periodic Syncs.
  void OnTimer();
  // The earliest Env time at which OnTimer has work to do.
  double NextTimerAt() const;
  // Messages produced since the last call, in the order they were produced.
  std::vector<MembershipSend> TakeSends();

  // Ids of the members in the view (alive or suspect), sorted, including self.
  std::vector<std::string> LiveIds() const;
  // Where to send to `id`: a known member's (tombstones included, so a reply can still be
  // sent) or a seed's endpoint, with the allowlisted curve key. nullopt if unknown.
  std::optional<Address> AddressOf(const std::string& id) const;
  // Increments whenever LiveIds() changes.
  uint64_t view_version() const { return view_version_; }
  // Own incarnation, raised to refute a suspicion or a death notice about self.
  uint64_t incarnation() const { return self_.incarnation; }
  // Messages and updates refused: failing the allowlist, unsigned or badly signed, or above
  // kMaxIncarnation.
  uint64_t refused_count() const { return refused_count_; }
  // True once a message from an allowlisted member arrived (a Sync, usually).
  bool joined() const { return joined_; }
  // The state this node holds for `id` (self included), tombstones included; nullopt if
  // unknown. For tests and metrics.
  std::optional<wire::MemberUpdate> Find(const std::string& id) const;

  // Replaces the allowlist (SIGHUP). Members no longer listed, or listed with other keys,
  // leave the view at once, tombstones included. An id listed twice keeps its first entry.
  // Self stays in the view regardless.
  void SetAllowlist(std::vector<PublicIdentity> allowlist);

  // Every known member, self first then by id, with its state, incarnation and signature
  // (for the node's checkpoint).
  std::vector<wire::MemberUpdate> Snapshot() const;
  // Adds checkpointed members to the view as alive, to be probed normally (a member that is
  // gone is then suspected and removed as usual). Self, dead entries, entries failing the
  // allowlist or their signature (a checkpoint written before records were signed) and
  // members already known are skipped. Does not mark the node joined.
  void Restore(const std::vector<wire::MemberUpdate>& members);

 private:
  // What this node believes about one other member. `since`: Env time it entered its state
  // (suspicion start for suspect, death for dead).
  struct Record {
    wire::MemberUpdate info;
    double since = 0;
  };
  // An update waiting to be piggybacked; one per member, the newest replacing older ones.
  struct Broadcast {
    wire::MemberUpdate update;
    uint32_t transmits = 0;
    uint64_t seq = 0;  // enqueue order: newer first among equally-sent updates
  };
  // The probe of the current interval.
  struct Probe {
    bool active = false;
    std::string target;
    uint64_t id = 0;
    double indirect_at = 0;  // when PingReqs go out unless acked
    bool acked = false;
    bool indirect_sent = false;
  };
  // A PingReq this node serves: its own Ping `target` answers is relayed to `requester`.
  struct Relay {
    std::string requester;
    uint64_t requester_probe_id = 0;
    std::string target;
    double expires_at = 0;
  };

  Membership(const MembershipOptions& options, const Identity& identity, std::string federation_id,
             wire::MemberUpdate self, std::map<std::string, PublicIdentity> allowlist,
             std::vector<Seed> seeds, Env& env);

  // Allowlist checks; Admissible counts a refusal.
  bool KeysMatch(const wire::MemberUpdate& u) const;
  bool Admissible(const wire::MemberUpdate& u);
  // Whether `u` is its member's own word: incarnation at most kMaxIncarnation and a valid
  // signature (not checked again when this node holds the same signed record). Counts a
  // refusal. REQUIRES: KeysMatch(u).
  bool Authentic(const wire::MemberUpdate& u);
  bool HasUsableSeed() const;
  Status CheckStructure(const std::string& from, const wire::Membership& m) const;

  // Merging. Returns the tombstone a first-hand record revived, if any.
  std::optional<wire::MemberUpdate> ApplySenderRecord(const std::string& from,
                                                      const wire::Membership& m);
  void ApplyUpdate(const wire::MemberUpdate& u);
  void ApplyAboutSelf(const wire::MemberUpdate& u);
  void SetRecord(Record& r, const wire::MemberUpdate& u);
  void Refute(uint64_t above);

  // Handlers per kind.
  void OnAck(const wire::Membership& m);
  void OnPingReq(const std::string& from, const wire::Membership& m);
  bool HasNewerThan(const std::vector<wire::MemberUpdate>& theirs) const;

  // Timers.
  void RetryJoin(double now);
  void StartProbe(double now);
  void FinishProbe();
  void SendIndirectProbes();
  void ExpireRecords(double now);
  void PeriodicSync(double now);

  // Outgoing messages.
  void Send(const std::string& to, wire::MembershipKind kind, uint64_t probe_id,
            std::string target);
  void SendSync(const std::string& to, uint64_t probe_id,
                const std::optional<wire::MemberUpdate>& tombstone);
  std::vector<wire::MemberUpdate> TakePiggyback();
  void Enqueue(const wire::MemberUpdate& u);
  uint32_t RetransmitLimit() const;

  // View helpers.
  bool IsLive(const std::string& id) const;
  std::vector<std::string> LiveOthers() const;
  std::vector<std::string> RandomLiveOthers(size_t k, const std::string& exclude);
  std::string NextProbeTarget();

  MembershipOptions options_;
  const Identity& identity_;
  std::string federation_id_;
  Env& env_;
  wire::MemberUpdate self_;  // signed by identity_
  std::map<std::string, PublicIdentity> allowlist_;
  std::vector<Seed> seeds_;
  std::map<std::string, Record> members_;  // everyone but self, tombstones included
  std::map<std::string, Broadcast> broadcasts_;
  uint64_t next_broadcast_seq_ = 0;
  std::vector<std::string> probe_order_;
  size_t probe_index_ = 0;
  Probe probe_;
  std::map<uint64_t, Relay> relays_;  // by the probe id of this node's own Ping
  uint64_t next_probe_id_ = 1;
  double next_probe_at_ = 0;
  double next_sync_at_ = 0;
  double next_join_at_ = 0;
  bool joined_ = false;
  uint64_t view_version_ = 0;
  uint64_t refused_count_ = 0;
  std::vector<MembershipSend> sends_;
};

}  // namespace fedmesh
