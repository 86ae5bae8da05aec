#include "node/ring_liveness.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <string_view>

#include "core/wire/wire_codec.h"
#include "core/host_port.h"

namespace fedmesh {
namespace {

// SWIM messages ride the liveness transport as kMessage chunks with this tag.
constexpr uint32_t kSwimOp = 0x5317D00Du;

}  // namespace

Result<std::string> SwimEndpoint(const std::string& ring_endpoint) {
  const std::string bad = "endpoint '" + ring_endpoint + "' is not tcp://HOST:PORT with PORT below 65535";
  constexpr std::string_view kTcp = "tcp://";
  if (ring_endpoint.rfind(kTcp, 0) != 0) return Status::InvalidArgument(bad);
  const std::string host_port = ring_endpoint.substr(kTcp.size());
  auto hp = ParseHostPort(host_port, "endpoint");
  if (!hp.ok() || hp->port < 1 || hp->port >= 65535) return Status::InvalidArgument(bad);
  return std::string(kTcp) + host_port.substr(0, host_port.rfind(':') + 1) + std::to_string(hp->port + 1);
}

Result<std::unique_ptr<RingLiveness>> RingLiveness::Start(const RingLivenessOptions& options, const Identity& identity,
                                                          std::vector<PublicIdentity> group, int me,
                                                          collective::CollectiveTransport* transport) {
  FM_RETURN_IF_ERROR(Validate(options.swim));
  if (options.group_id.empty()) return Status::InvalidArgument("ring liveness: group_id is required");
  if (me < 0 || me >= static_cast<int>(group.size()) || group[me].name != identity.name()) {
    return Status::InvalidArgument("ring liveness: member " + std::to_string(me) + " is not " + identity.name());
  }
  std::unique_ptr<RingLiveness> l(new RingLiveness());
  l->options_ = options;
  l->me_ = me;
  l->transport_ = transport;
  l->federation_ = options.group_id;
  std::vector<Seed> seeds;
  for (size_t i = 0; i < group.size(); ++i) {
    l->ids_.push_back(group[i].name);
    if (static_cast<int>(i) != me) seeds.push_back(Seed{group[i].name, "member-" + std::to_string(i)});
  }
  l->dead_.assign(group.size(), false);
  // Seeded from the clock: probe order and jitter need no reproducibility across members.
  l->env_ = std::make_unique<SystemEnv>(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                                        static_cast<uint64_t>(me));
  // The incarnation grows across restarts (milliseconds since the epoch), so a restarted
  // member's record outranks what the others hold about its previous life.
  const auto incarnation = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  FM_ASSIGN_OR_RETURN(l->membership_, Membership::Create(options.swim, identity, options.group_id,
                                                         "member-" + std::to_string(me), incarnation, std::move(group),
                                                         std::move(seeds), *l->env_));
  l->thread_ = std::thread([p = l.get()] { p->Run(); });
  return l;
}

RingLiveness::~RingLiveness() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

bool RingLiveness::Dead(int member) const {
  std::lock_guard<std::mutex> lock(mu_);
  return member >= 0 && member < static_cast<int>(dead_.size()) && dead_[member];
}

void RingLiveness::Publish() {
  std::vector<bool> now(ids_.size(), false);
  for (size_t i = 0; i < ids_.size(); ++i) {
    const auto r = membership_->Find(ids_[i]);
    now[i] = r && r->state == wire::MemberState::kDead;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i] && !dead_[i]) ++deaths_;
  }
  dead_ = std::move(now);
}

void RingLiveness::Run() {
  while (!stop_.load()) {
    for (MembershipSend& s : membership_->TakeSends()) {
      const auto to = std::find(ids_.begin(), ids_.end(), s.to);
      if (to == ids_.end()) continue;
      wire::Message m;
      m.header.federation_id = federation_;
      m.header.sender_id = ids_[me_];
      m.header.message_id = ++sequence_;
      m.body = std::move(s.message);
      // A membership message has no payload: it is one frame, the chunk's bytes.
      auto frames = wire::Encode(m);
      if (!frames.ok() || frames->size() != 1) continue;
      collective::Chunk c;
      c.kind = collective::OpKind::kMessage;
      c.op = kSwimOp;
      c.bytes = collective::Payload(std::string(frames->front().begin(), frames->front().end()));
      (void)transport_->Send(static_cast<int>(to - ids_.begin()), std::move(c));  // a dead peer: SWIM's business
    }
    Publish();
    // Everything that arrived is read before the timers run: on a busy machine a queued Ack or
    // refutation must count before a probe or a suspicion times out.
    const double wait_s = std::clamp(membership_->NextTimerAt() - env_->NowSeconds(), 0.0, 0.05);
    int wait_ms = static_cast<int>(wait_s * 1000);
    for (int n = 0; n < 1024; ++n) {  // bounded: a flood must not keep the timers from running
      auto got = transport_->Receive(wait_ms);
      wait_ms = 0;
      if (!got.ok() || !got->has_value()) break;
      auto& [from, chunk] = **got;
      if (chunk.kind != collective::OpKind::kMessage || chunk.op != kSwimOp || from < 0 ||
          from >= static_cast<int>(ids_.size())) {
        continue;
      }
      const std::string_view bytes = chunk.bytes.view();
      const wire::Frame frame(bytes.begin(), bytes.end());
      auto m = wire::Decode(std::span<const wire::Frame>(&frame, 1));
      // The sender is the member the transport authenticated, whatever the header says.
      if (m.ok() && m->header.federation_id == federation_ && m->header.sender_id == ids_[from]) {
        if (const auto* body = std::get_if<wire::Membership>(&m->body)) {
          (void)membership_->OnMessage(ids_[from], *body);  // refusals are counted inside
        }
      }
    }
    membership_->OnTimer();
  }
}

}  // namespace fedmesh
