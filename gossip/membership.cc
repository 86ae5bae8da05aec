#include "gossip/membership.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/to_text.h"

namespace fedmesh {
namespace {

using wire::MembershipKind;
using wire::MemberState;
using wire::MemberUpdate;

// The wire's default WireLimits::max_members: a Sync never carries more updates.
constexpr size_t kMaxUpdatesPerMessage = 4096;

template <typename T>
Status Bad(std::string_view field, const T& value, std::string_view rule) {
  return Status::InvalidArgument(std::string(field) + " is " + ToText(value) + "; it must be " +
                                 std::string(rule));
}

Status CheckDuration(std::string_view field, double v) {
  if (!std::isfinite(v) || v <= 0) return Bad(field, v, "finite and > 0 seconds");
  return Status::OK();
}

// SWIM's precedence: the higher incarnation wins; at equal incarnation dead > suspect >
// alive (the enum's order), so a suspicion can only be lifted by the member itself.
bool Overrides(const MemberUpdate& a, const MemberUpdate& b) {
  if (a.incarnation != b.incarnation) return a.incarnation > b.incarnation;
  return a.state > b.state;
}

std::map<std::string, PublicIdentity> FirstEntryPerName(std::vector<PublicIdentity> list) {
  std::map<std::string, PublicIdentity> out;
  for (auto& p : list) out.emplace(p.name, std::move(p));
  return out;
}

}  // namespace

Status Validate(const MembershipOptions& o) {
  FM_RETURN_IF_ERROR(CheckDuration("probe_interval_s", o.probe_interval_s));
  FM_RETURN_IF_ERROR(CheckDuration("probe_timeout_s", o.probe_timeout_s));
  if (o.probe_timeout_s >= o.probe_interval_s) {
    return Status::InvalidArgument("probe_timeout_s (" + ToText(o.probe_timeout_s) +
                                   ") must be below probe_interval_s (" + ToText(o.probe_interval_s) +
                                   "): the indirect probes need the rest of the interval");
  }
  if (o.indirect_probes < 1) return Bad("indirect_probes", o.indirect_probes, ">= 1");
  FM_RETURN_IF_ERROR(CheckDuration("suspicion_timeout_s", o.suspicion_timeout_s));
  if (o.retransmit_mult < 1) return Bad("retransmit_mult", o.retransmit_mult, ">= 1");
  if (o.max_piggyback < 1 || o.max_piggyback >= kMaxUpdatesPerMessage) {
    return Bad("max_piggyback", o.max_piggyback, "in [1, 4095]");
  }
  FM_RETURN_IF_ERROR(CheckDuration("sync_interval_s", o.sync_interval_s));
  FM_RETURN_IF_ERROR(CheckDuration("join_retry_s", o.join_retry_s));
  return CheckDuration("dead_retention_s", o.dead_retention_s);
}

// ---- Construction ------------------------------------------------------------------------

Result<std::unique_ptr<Membership>> Membership::Create(const MembershipOptions& options,
                                                       const Identity& identity,
                                                       std::string federation_id,
                                                       std::string endpoint, uint64_t incarnation,
                                                       std::vector<PublicIdentity> allowlist,
                                                       std::vector<Seed> seeds, Env& env) {
  FM_RETURN_IF_ERROR(Validate(options));
  if (federation_id.empty()) {
    return Status::InvalidArgument("the federation id is empty; member records are signed for one");
  }
  if (endpoint.empty()) {
    return Status::InvalidArgument("self needs an endpoint (where its gossip socket listens)");
  }
  if (incarnation > kMaxIncarnation) {
    return Status::InvalidArgument("incarnation " + ToText(incarnation) + " is above the largest, " +
                                   ToText(kMaxIncarnation) + "; is the checkpoint damaged?");
  }
  MemberUpdate self;
  self.id = identity.name();
  self.endpoint = std::move(endpoint);
  self.curve_public = identity.public_identity().curve_public;
  self.sign_public = identity.public_identity().sign_public;
  self.incarnation = incarnation;
  std::map<std::string, PublicIdentity> list;
  for (auto& p : allowlist) {
    const std::string name = p.name;
    if (!list.emplace(name, std::move(p)).second) {
      return Status::InvalidArgument("the allowlist lists " + name +
                                     " twice; keep one entry per site");
    }
  }
  auto it = list.find(self.id);
  if (it == list.end() || it->second.curve_public != self.curve_public ||
      it->second.sign_public != self.sign_public) {
    return Status::InvalidArgument("self (" + self.id +
                                   ") is not in the allowlist with its own keys; enroll it");
  }
  self.state = MemberState::kAlive;
  FM_RETURN_IF_ERROR(SignMember(identity, federation_id, &self));
  std::erase_if(seeds, [&](const Seed& s) { return s.id == self.id; });
  return std::unique_ptr<Membership>(new Membership(options, identity, std::move(federation_id),
                                                    std::move(self), std::move(list),
                                                    std::move(seeds), env));
}

Membership::Membership(const MembershipOptions& options, const Identity& identity,
                       std::string federation_id, MemberUpdate self,
                       std::map<std::string, PublicIdentity> allowlist, std::vector<Seed> seeds,
                       Env& env)
    : options_(options),
      identity_(identity),
      federation_id_(std::move(federation_id)),
      env_(env),
      self_(std::move(self)),
      allowlist_(std::move(allowlist)),
      seeds_(std::move(seeds)) {
  const double now = env_.NowSeconds();
  next_join_at_ = now;  // join at the first OnTimer
  // Random phases keep nodes started together from probing and syncing in lockstep.
  next_probe_at_ = now + options_.probe_interval_s * env_.rng().Uniform();
  next_sync_at_ = now + options_.sync_interval_s * env_.rng().Uniform(0.5, 1.0);
}

// ---- Allowlist ---------------------------------------------------------------------------

bool Membership::KeysMatch(const MemberUpdate& u) const {
  auto it = allowlist_.find(u.id);
  return it != allowlist_.end() && it->second.curve_public == u.curve_public &&
         it->second.sign_public == u.sign_public;
}

bool Membership::Admissible(const MemberUpdate& u) {
  if (KeysMatch(u)) return true;
  ++refused_count_;
  return false;
}

bool Membership::Authentic(const MemberUpdate& u) {
  if (u.incarnation > kMaxIncarnation) {
    ++refused_count_;
    return false;
  }
  // The same signed content as a record already held (and checked when it arrived): only
  // the state differs, which is not signed.
  const MemberUpdate* held = nullptr;
  if (u.id == self_.id) {
    held = &self_;
  } else if (auto it = members_.find(u.id); it != members_.end()) {
    held = &it->second.info;
  }
  if (held != nullptr && held->incarnation == u.incarnation && held->endpoint == u.endpoint &&
      held->signature == u.signature) {
    return true;
  }
  if (!VerifyMember(allowlist_.at(u.id), federation_id_, u).ok()) {
    ++refused_count_;
    return false;
  }
  return true;
}

bool Membership::HasUsableSeed() const {
  return std::any_of(seeds_.begin(), seeds_.end(),
                     [&](const Seed& s) { return allowlist_.contains(s.id); });
}

void Membership::SetAllowlist(std::vector<PublicIdentity> allowlist) {
  allowlist_ = FirstEntryPerName(std::move(allowlist));
  bool changed = false;
  for (auto it = members_.begin(); it != members_.end();) {
    if (KeysMatch(it->second.info)) {
      ++it;
      continue;
    }
    changed |= it->second.info.state != MemberState::kDead;
    broadcasts_.erase(it->first);
    it = members_.erase(it);
  }
  if (changed) ++view_version_;
}

// ---- Input -------------------------------------------------------------------------------

Status Membership::CheckStructure(const std::string& from, const wire::Membership& m) const {
  switch (m.kind) {
    case MembershipKind::kJoin:
      if (m.updates.empty() || m.updates[0].id != from) {
        return Status::InvalidArgument("Join from " + from +
                                       " does not describe its sender in updates[0]");
      }
      break;
    case MembershipKind::kPingReq:
      if (m.target.empty() || m.target == from) {
        return Status::InvalidArgument("PingReq from " + from + " names target \"" + m.target +
                                       "\"; it must name another member");
      }
      break;
    case MembershipKind::kAck:
      if (m.target.empty()) {
        return Status::InvalidArgument("Ack from " + from + " does not name who answered");
      }
      break;
    case MembershipKind::kPing:
    case MembershipKind::kSync:
      break;
    default:
      return Status::InvalidArgument("Membership kind " + ToText(static_cast<uint32_t>(m.kind)) +
                                     " is unknown");
  }
  return Status::OK();
}

Status Membership::OnMessage(const std::string& from, const wire::Membership& m) {
  if (!allowlist_.contains(from)) {
    ++refused_count_;
    return Status::PermissionDenied("membership message from " + from +
                                    ", which is not in the allowlist; enroll its keys to admit it");
  }
  FM_RETURN_IF_ERROR(CheckStructure(from, m));
  joined_ = true;
  const bool has_sender_record = !m.updates.empty() && m.updates[0].id == from;
  const std::optional<MemberUpdate> tombstone = ApplySenderRecord(from, m);
  for (size_t i = has_sender_record ? 1 : 0; i < m.updates.size(); ++i) ApplyUpdate(m.updates[i]);

  bool synced = false;
  switch (m.kind) {
    case MembershipKind::kPing:
      Send(from, MembershipKind::kAck, m.probe_id, self_.id);
      break;
    case MembershipKind::kAck:
      OnAck(m);
      break;
    case MembershipKind::kPingReq:
      OnPingReq(from, m);
      break;
    case MembershipKind::kJoin:
      SendSync(from, 0, tombstone);
      synced = true;
      break;
    case MembershipKind::kSync:
      // Answer a push-pull request only with news, and never answer an answer.
      if (tombstone || (m.probe_id != 0 && HasNewerThan(m.updates))) {
        SendSync(from, 0, tombstone);
        synced = true;
      }
      break;
  }
  // A member we had declared dead is running: tell it, so it refutes with a higher
  // incarnation that overrides everyone else's tombstone.
  if (tombstone && !synced) SendSync(from, 0, tombstone);
  return Status::OK();
}

std::optional<MemberUpdate> Membership::ApplySenderRecord(const std::string& from,
                                                          const wire::Membership& m) {
  if (m.updates.empty() || m.updates[0].id != from || from == self_.id) return std::nullopt;
  MemberUpdate u = m.updates[0];
  if (!Admissible(u) || !Authentic(u)) return std::nullopt;
  u.state = MemberState::kAlive;  // it is evidently running, whatever it claims
  auto it = members_.find(from);
  if (it == members_.end()) {
    ApplyUpdate(u);
    return std::nullopt;
  }
  Record& r = it->second;
  if (Overrides(u, r.info)) {
    SetRecord(r, u);
    Enqueue(u);
    return std::nullopt;
  }
  // First-hand, signed at the incarnation held: where it listens now. (Signed lower, it is
  // a restart that lost its checkpoint; it refutes above ours once it hears it.)
  if (u.incarnation == r.info.incarnation) {
    r.info.endpoint = u.endpoint;
    r.info.signature = u.signature;
  }
  if (r.info.state != MemberState::kDead) return std::nullopt;
  // Revive without gossiping: others hold the same tombstone, which beats "alive" at this
  // incarnation; the member's own refutation will override it everywhere.
  MemberUpdate old = r.info;
  r.info.state = MemberState::kAlive;
  r.since = env_.NowSeconds();
  ++view_version_;
  return old;
}

void Membership::ApplyUpdate(const MemberUpdate& u) {
  if (!Admissible(u)) return;
  if (u.id == self_.id) {
    ApplyAboutSelf(u);
    return;
  }
  auto it = members_.find(u.id);
  // Stale news changes nothing: no need to check its signature.
  if (it != members_.end() && !Overrides(u, it->second.info)) return;
  if (!Authentic(u)) return;
  if (it == members_.end()) {
    // A tombstone of a member never seen blocks stale "alive" gossip but is not news.
    members_.emplace(u.id, Record{u, env_.NowSeconds()});
    if (u.state == MemberState::kDead) return;
    ++view_version_;
    Enqueue(u);
    return;
  }
  SetRecord(it->second, u);
  Enqueue(u);
}

void Membership::ApplyAboutSelf(const MemberUpdate& u) {
  // Suspected or declared dead at our incarnation, or someone saw a later incarnation of
  // us (a previous run of this node): outbid it.
  // Only a record this node signed (now or in a previous run) can make it refute.
  const bool accused = u.state != MemberState::kAlive && u.incarnation >= self_.incarnation;
  if ((accused || u.incarnation > self_.incarnation) && Authentic(u)) Refute(u.incarnation);
}

void Membership::Refute(uint64_t above) {
  // Unreachable unless this node signed kMaxIncarnation itself: stay put rather than sign a
  // record every receiver refuses.
  if (above >= kMaxIncarnation) return;
  MemberUpdate next = self_;
  next.incarnation = above + 1;
  // Signing fails only if libsodium cannot start, and Create has signed already.
  if (!SignMember(identity_, federation_id_, &next).ok()) return;
  // No broadcast entry is needed: every message this node sends starts with its own record.
  self_ = std::move(next);
}

void Membership::SetRecord(Record& r, const MemberUpdate& u) {
  const bool was_live = r.info.state != MemberState::kDead;
  const bool now_live = u.state != MemberState::kDead;
  if (u.state != r.info.state || u.incarnation != r.info.incarnation) r.since = env_.NowSeconds();
  r.info = u;
  if (was_live != now_live) ++view_version_;
}

void Membership::OnAck(const wire::Membership& m) {
  auto relay = relays_.find(m.probe_id);
  if (relay != relays_.end() && relay->second.target == m.target) {
    Send(relay->second.requester, MembershipKind::kAck, relay->second.requester_probe_id, m.target);
    relays_.erase(relay);
    return;
  }
  if (probe_.active && m.probe_id == probe_.id && m.target == probe_.target) probe_.acked = true;
}

void Membership::OnPingReq(const std::string& from, const wire::Membership& m) {
  if (m.target == self_.id) {  // asked to ping ourselves: we are the answer
    Send(from, MembershipKind::kAck, m.probe_id, self_.id);
    return;
  }
  if (!members_.contains(m.target)) return;  // not known here (yet): nothing to ping
  const uint64_t id = next_probe_id_++;
  relays_[id] = Relay{from, m.probe_id, m.target, env_.NowSeconds() + options_.probe_interval_s};
  Send(m.target, MembershipKind::kPing, id, "");
}

bool Membership::HasNewerThan(const std::vector<MemberUpdate>& theirs) const {
  std::map<std::string_view, const MemberUpdate*> by_id;
  for (const MemberUpdate& u : theirs) by_id.emplace(u.id, &u);
  auto newer = [&](const MemberUpdate& mine) {
    auto it = by_id.find(mine.id);
    return it == by_id.end() || Overrides(mine, *it->second);
  };
  if (newer(self_)) return true;
  for (const auto& [id, r] : members_) {
    if (newer(r.info)) return true;
  }
  return false;
}

// ---- Timers ------------------------------------------------------------------------------

void Membership::OnTimer() {
  const double now = env_.NowSeconds();
  if (!joined_ && now >= next_join_at_) RetryJoin(now);
  if (probe_.active && !probe_.acked && !probe_.indirect_sent && now >= probe_.indirect_at) {
    SendIndirectProbes();
  }
  if (now >= next_probe_at_) {
    FinishProbe();
    StartProbe(now);
  }
  ExpireRecords(now);
  if (now >= next_sync_at_) PeriodicSync(now);
}

double Membership::NextTimerAt() const {
  double t = std::min(next_probe_at_, next_sync_at_);
  if (!joined_ && HasUsableSeed()) t = std::min(t, next_join_at_);
  if (probe_.active && !probe_.acked && !probe_.indirect_sent) t = std::min(t, probe_.indirect_at);
  for (const auto& [id, r] : members_) {
    if (r.info.state == MemberState::kSuspect) {
      t = std::min(t, r.since + options_.suspicion_timeout_s);
    } else if (r.info.state == MemberState::kDead) {
      t = std::min(t, r.since + options_.dead_retention_s);
    }
  }
  return t;
}

void Membership::RetryJoin(double now) {
  next_join_at_ = now + options_.join_retry_s;
  for (const Seed& s : seeds_) {
    if (!allowlist_.contains(s.id)) continue;
    wire::Membership m;
    m.kind = MembershipKind::kJoin;
    m.updates = {self_};
    sends_.push_back({s.id, std::move(m)});
  }
}

void Membership::StartProbe(double now) {
  next_probe_at_ = now + options_.probe_interval_s;
  probe_ = Probe{};
  std::string target = NextProbeTarget();
  if (target.empty()) return;
  probe_ = Probe{true, target, next_probe_id_++, now + options_.probe_timeout_s, false, false};
  Send(target, MembershipKind::kPing, probe_.id, "");
}

void Membership::FinishProbe() {
  if (!probe_.active || probe_.acked) return;
  probe_.active = false;
  auto it = members_.find(probe_.target);
  if (it == members_.end() || it->second.info.state != MemberState::kAlive) return;
  MemberUpdate u = it->second.info;
  u.state = MemberState::kSuspect;
  SetRecord(it->second, u);
  Enqueue(u);
}

void Membership::SendIndirectProbes() {
  probe_.indirect_sent = true;
  for (const std::string& helper : RandomLiveOthers(options_.indirect_probes, probe_.target)) {
    Send(helper, MembershipKind::kPingReq, probe_.id, probe_.target);
  }
}

void Membership::ExpireRecords(double now) {
  for (auto it = members_.begin(); it != members_.end();) {
    Record& r = it->second;
    if (r.info.state == MemberState::kSuspect && now >= r.since + options_.suspicion_timeout_s) {
      MemberUpdate u = r.info;
      u.state = MemberState::kDead;
      SetRecord(r, u);
      Enqueue(u);
    } else if (r.info.state == MemberState::kDead && now >= r.since + options_.dead_retention_s) {
      broadcasts_.erase(it->first);
      it = members_.erase(it);
      continue;
    }
    ++it;
  }
  std::erase_if(relays_, [&](const auto& kv) { return now >= kv.second.expires_at; });
}

void Membership::PeriodicSync(double now) {
  next_sync_at_ = now + options_.sync_interval_s;
  std::vector<std::string> peer = RandomLiveOthers(1, "");
  if (!peer.empty()) SendSync(peer[0], next_probe_id_++, std::nullopt);
}

// ---- Output ------------------------------------------------------------------------------

std::vector<MembershipSend> Membership::TakeSends() { return std::exchange(sends_, {}); }

void Membership::Send(const std::string& to, MembershipKind kind, uint64_t probe_id,
                      std::string target) {
  wire::Membership m;
  m.kind = kind;
  m.probe_id = probe_id;
  m.target = std::move(target);
  m.updates = TakePiggyback();
  m.updates.insert(m.updates.begin(), self_);
  sends_.push_back({to, std::move(m)});
}

void Membership::SendSync(const std::string& to, uint64_t probe_id,
                          const std::optional<MemberUpdate>& tombstone) {
  wire::Membership m;
  m.kind = MembershipKind::kSync;
  m.probe_id = probe_id;
  m.updates.push_back(self_);
  for (const auto& [id, r] : members_) {
    if (m.updates.size() == kMaxUpdatesPerMessage) break;  // the rest travels by gossip
    m.updates.push_back(tombstone && tombstone->id == id ? *tombstone : r.info);
  }
  sends_.push_back({to, std::move(m)});
}

std::vector<MemberUpdate> Membership::TakePiggyback() {
  std::vector<Broadcast*> queue;
  queue.reserve(broadcasts_.size());
  for (auto& [id, b] : broadcasts_) queue.push_back(&b);
  const size_t n = std::min<size_t>(queue.size(), options_.max_piggyback);
  std::partial_sort(queue.begin(), queue.begin() + n, queue.end(),
                    [](const Broadcast* a, const Broadcast* b) {
                      if (a->transmits != b->transmits) return a->transmits < b->transmits;
                      return a->seq > b->seq;
                    });
  std::vector<MemberUpdate> out;
  out.reserve(n + 1);
  const uint32_t limit = RetransmitLimit();
  for (size_t i = 0; i < n; ++i) {
    out.push_back(queue[i]->update);
    if (++queue[i]->transmits >= limit) broadcasts_.erase(queue[i]->update.id);
  }
  return out;
}

void Membership::Enqueue(const MemberUpdate& u) {
  Broadcast& b = broadcasts_[u.id];
  b.update = u;
  b.transmits = 0;
  b.seq = next_broadcast_seq_++;
}

uint32_t Membership::RetransmitLimit() const {
  // ceil(log2(n + 1)) rounds reach all n members with high probability (infection-style
  // dissemination); the multiplier buys margin against loss.
  const uint64_t n = LiveOthers().size() + 1;
  uint32_t bits = 0;
  while ((uint64_t{1} << bits) < n + 1) ++bits;
  return options_.retransmit_mult * bits;
}

// ---- View --------------------------------------------------------------------------------

bool Membership::IsLive(const std::string& id) const {
  if (id == self_.id) return true;
  auto it = members_.find(id);
  return it != members_.end() && it->second.info.state != MemberState::kDead;
}

std::vector<std::string> Membership::LiveOthers() const {
  std::vector<std::string> out;
  for (const auto& [id, r] : members_) {
    if (r.info.state != MemberState::kDead) out.push_back(id);
  }
  return out;
}

std::vector<std::string> Membership::RandomLiveOthers(size_t k, const std::string& exclude) {
  std::vector<std::string> ids = LiveOthers();
  std::erase(ids, exclude);
  env_.rng().Shuffle(ids);
  if (ids.size() > k) ids.resize(k);
  return ids;
}

std::string Membership::NextProbeTarget() {
  // Round robin over a shuffled list, reshuffled each pass: every member is probed once
  // per pass (SWIM's bounded worst-case detection) in an order no one can predict.
  for (int pass = 0; pass < 2; ++pass) {
    while (probe_index_ < probe_order_.size()) {
      const std::string& id = probe_order_[probe_index_++];
      if (IsLive(id) && id != self_.id) return id;
    }
    probe_order_ = LiveOthers();
    env_.rng().Shuffle(probe_order_);
    probe_index_ = 0;
  }
  return "";
}

std::vector<std::string> Membership::LiveIds() const {
  std::vector<std::string> ids = LiveOthers();
  ids.insert(std::upper_bound(ids.begin(), ids.end(), self_.id), self_.id);
  return ids;
}

std::optional<Address> Membership::AddressOf(const std::string& id) const {
  auto key = allowlist_.find(id);
  if (key == allowlist_.end()) return std::nullopt;
  if (id == self_.id) return Address{self_.endpoint, key->second.curve_public};
  if (auto it = members_.find(id); it != members_.end()) {
    return Address{it->second.info.endpoint, key->second.curve_public};
  }
  for (const Seed& s : seeds_) {
    if (s.id == id) return Address{s.endpoint, key->second.curve_public};
  }
  return std::nullopt;
}

std::optional<MemberUpdate> Membership::Find(const std::string& id) const {
  if (id == self_.id) return self_;
  auto it = members_.find(id);
  if (it == members_.end()) return std::nullopt;
  return it->second.info;
}

// ---- Checkpoint --------------------------------------------------------------------------

std::vector<MemberUpdate> Membership::Snapshot() const {
  std::vector<MemberUpdate> out;
  out.reserve(members_.size() + 1);
  out.push_back(self_);
  for (const auto& [id, r] : members_) out.push_back(r.info);
  return out;
}

void Membership::Restore(const std::vector<MemberUpdate>& members) {
  bool changed = false;
  for (MemberUpdate u : members) {
    if (u.id == self_.id || u.state == MemberState::kDead || !KeysMatch(u) ||
        members_.contains(u.id) || u.incarnation > kMaxIncarnation ||
        !VerifyMember(allowlist_.at(u.id), federation_id_, u).ok()) {
      continue;
    }
    u.state = MemberState::kAlive;
    members_.emplace(u.id, Record{u, env_.NowSeconds()});
    changed = true;
  }
  if (changed) ++view_version_;
}

}  // namespace fedmesh
