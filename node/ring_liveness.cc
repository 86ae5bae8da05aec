#include "node/ring_liveness.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/wire/wire_codec.h"

namespace fedmesh {
namespace {

// SWIM messages ride the liveness transport as kMessage chunks with this tag.
constexpr uint32_t kSwimOp = 0x5317D00Du;

void Put32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

bool Get32(std::string_view& in, uint32_t& v) {
  if (in.size() < 4) return false;
  v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(in[i])) << (8 * i);
  in.remove_prefix(4);
  return true;
}

// A wire message's frames as one chunk's bytes: a count, then each frame length-prefixed.
std::string Pack(const std::vector<wire::Frame>& frames) {
  std::string out;
  Put32(out, static_cast<uint32_t>(frames.size()));
  for (const wire::Frame& f : frames) {
    Put32(out, static_cast<uint32_t>(f.size()));
    out.append(reinterpret_cast<const char*>(f.data()), f.size());
  }
  return out;
}

std::optional<std::vector<wire::Frame>> Unpack(std::string_view in) {
  uint32_t count = 0;
  if (!Get32(in, count) || count == 0 || count > 4) return std::nullopt;  // a membership message is one frame
  std::vector<wire::Frame> frames(count);
  for (wire::Frame& f : frames) {
    uint32_t n = 0;
    if (!Get32(in, n) || n > in.size()) return std::nullopt;
    f.assign(in.begin(), in.begin() + n);
    in.remove_prefix(n);
  }
  if (!in.empty()) return std::nullopt;
  return frames;
}

}  // namespace

Result<std::string> SwimEndpoint(const std::string& ring_endpoint) {
  const size_t colon = ring_endpoint.rfind(':');
  const std::string bad = "endpoint '" + ring_endpoint + "' is not tcp://HOST:PORT with PORT below 65535";
  if (ring_endpoint.rfind("tcp://", 0) != 0 || colon == std::string::npos || colon <= 6) {
    return Status::InvalidArgument(bad);
  }
  const std::string port = ring_endpoint.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
    return Status::InvalidArgument(bad);
  }
  const int p = std::stoi(port);
  if (p < 1 || p >= 65535) return Status::InvalidArgument(bad);
  return ring_endpoint.substr(0, colon + 1) + std::to_string(p + 1);
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
      auto frames = wire::Encode(m);
      if (!frames.ok()) continue;
      collective::Chunk c;
      c.kind = collective::OpKind::kMessage;
      c.op = kSwimOp;
      c.bytes = collective::Payload(Pack(*frames));
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
      if (chunk.kind == collective::OpKind::kMessage && chunk.op == kSwimOp && from >= 0 &&
          from < static_cast<int>(ids_.size())) {
        if (auto frames = Unpack(chunk.bytes.view())) {
          auto m = wire::Decode(*frames);
          // The sender is the member the transport authenticated, whatever the header says.
          if (m.ok() && m->header.federation_id == federation_ && m->header.sender_id == ids_[from]) {
            if (const auto* body = std::get_if<wire::Membership>(&m->body)) {
              (void)membership_->OnMessage(ids_[from], *body);  // refusals are counted inside
            }
          }
        }
      }
    }
    membership_->OnTimer();
  }
}

}  // namespace fedmesh
