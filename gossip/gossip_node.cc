#include "gossip/gossip_node.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <span>
#include <sstream>
#include <utility>

#include "crypto/z85.h"
#include "gossip/signed_member.h"
#include "gossip/signed_model.h"

namespace fedmesh {
namespace {

constexpr const char* kSequence = "gossip/sequence";
constexpr const char* kIncarnation = "gossip/incarnation";
constexpr const char* kWeight = "gossip/weight";
constexpr const char* kMembers = "gossip/members";
constexpr const char* kReplay = "gossip/replay";
constexpr const char* kXHat = "gossip/x_hat";

bool ParseU64(const std::string& text, uint64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

std::string Hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

bool FromHex(const std::string& text, std::vector<uint8_t>* out) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (text.size() % 2 != 0) return false;
  out->clear();
  for (size_t i = 0; i < text.size(); i += 2) {
    const int hi = nibble(text[i]), lo = nibble(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<uint8_t>(hi << 4 | lo));
  }
  return true;
}

// One member per line: id endpoint curve-z85 sign-z85 incarnation state signature-hex (the
// member's own signature, gossip/signed_member.h; lines written before records were signed
// lack it, and Membership::Restore skips those members).
std::string EncodeMembers(const std::vector<wire::MemberUpdate>& members) {
  std::ostringstream os;
  for (const auto& m : members) {
    os << m.id << ' ' << m.endpoint << ' ' << Z85Encode(m.curve_public) << ' '
       << Z85Encode(m.sign_public) << ' ' << m.incarnation << ' ' << static_cast<uint32_t>(m.state)
       << ' ' << Hex(m.signature) << '\n';
  }
  return os.str();
}

Result<std::vector<wire::MemberUpdate>> DecodeMembers(const std::string& text) {
  std::vector<wire::MemberUpdate> out;
  std::istringstream is(text);
  std::string line;
  for (int n = 1; std::getline(is, line); ++n) {
    std::istringstream ls(line);
    wire::MemberUpdate m;
    std::string curve, sign, signature;
    uint32_t state = 0;
    if (!(ls >> m.id >> m.endpoint >> curve >> sign >> m.incarnation >> state) ||
        !Z85Decode(curve, m.curve_public) || !Z85Decode(sign, m.sign_public) || state < 1 ||
        state > 3 || ((ls >> signature) && !FromHex(signature, &m.signature))) {
      return Status::Corruption("checkpoint attribute gossip/members line " + std::to_string(n) +
                                " is not 'id endpoint curve sign incarnation state [signature]'");
    }
    m.state = static_cast<wire::MemberState>(state);
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

Status Validate(const GossipNodeOptions& o) {
  if (o.federation_id.empty()) return Status::InvalidArgument("gossip federation_id is empty");
  if (!std::isfinite(o.period_s) || o.period_s <= 0) {
    return Status::InvalidArgument("gossip period_s must be finite and > 0");
  }
  if (!std::isfinite(o.join_pull_timeout_s) || o.join_pull_timeout_s < 0) {
    return Status::InvalidArgument("gossip join_pull_timeout_s must be finite and >= 0");
  }
  FM_RETURN_IF_ERROR(Validate(o.membership));
  return Validate(o.averaging);
}

GossipNode::GossipNode(const GossipNodeOptions& options, const Identity& identity, Env& env)
    : options_(options),
      identity_(identity),
      env_(env),
      id_(identity.name()),
      next_sequence_(std::max<uint64_t>(options.first_sequence, 1)) {}

Result<std::unique_ptr<GossipNode>> GossipNode::Create(
    const GossipNodeOptions& options, const Identity& identity, std::string endpoint,
    std::vector<PublicIdentity> allowlist, std::vector<Seed> seeds,
    std::vector<float> initial_model, Env& env, const NodeCheckpoint* restored) {
  FM_RETURN_IF_ERROR(Validate(options));
  std::unique_ptr<GossipNode> node(new GossipNode(options, identity, env));
  for (const auto& p : allowlist) node->allowlist_[p.name] = p;
  auto self_entry = node->allowlist_.find(node->id_);
  if (self_entry == node->allowlist_.end() ||
      !(self_entry->second == identity.public_identity())) {
    return Status::InvalidArgument("gossip node " + node->id_ +
                                   " is not in the allowlist with its own keys");
  }
  uint64_t incarnation = 0;
  if (restored != nullptr) {
    if (auto it = restored->attributes.find(kIncarnation); it != restored->attributes.end()) {
      if (!ParseU64(it->second, &incarnation) || incarnation > kMaxIncarnation) {
        return Status::Corruption("checkpoint attribute gossip/incarnation is not a number up to " +
                                  std::to_string(kMaxIncarnation));
      }
    }
  }
  FM_ASSIGN_OR_RETURN(
      node->membership_,
      Membership::Create(options.membership, identity, options.federation_id, std::move(endpoint),
                         incarnation, std::move(allowlist), std::move(seeds), env));
  FM_ASSIGN_OR_RETURN(node->averager_, Averager::Create(options.averaging, node->id_,
                                                        std::move(initial_model), env));
  node->started_at_ = env.NowSeconds();
  node->next_pull_at_ = node->started_at_;
  if (restored != nullptr) {
    FM_RETURN_IF_ERROR(node->RestoreFrom(*restored));
    node->StartRunning();  // a restarted node resumes from its own state
  }
  node->QueueMembership();
  return node;
}

Status GossipNode::RestoreFrom(const NodeCheckpoint& cp) {
  Averager::State state;
  state.x = cp.model;
  state.step = cp.model_version;
  if (auto it = cp.tensors.find(kXHat); it != cp.tensors.end()) state.x_hat = it->second;
  const auto& attrs = cp.attributes;
  if (auto it = attrs.find(kWeight); it != attrs.end()) {
    char* end = nullptr;
    state.weight = std::strtod(it->second.c_str(), &end);
    if (*end != '\0' || !std::isfinite(state.weight) || state.weight < 0) {
      return Status::Corruption("checkpoint attribute gossip/weight is not a finite weight");
    }
  }
  FM_RETURN_IF_ERROR(averager_->Restore(std::move(state)));
  if (auto it = attrs.find(kSequence); it != attrs.end()) {
    uint64_t seq = 0;
    if (!ParseU64(it->second, &seq)) {
      return Status::Corruption("checkpoint attribute gossip/sequence is not a number");
    }
    next_sequence_ = std::max(next_sequence_, seq + 1);
  }
  if (auto it = attrs.find(kMembers); it != attrs.end()) {
    FM_ASSIGN_OR_RETURN(std::vector<wire::MemberUpdate> members, DecodeMembers(it->second));
    membership_->Restore(members);
  }
  if (auto it = attrs.find(kReplay); it != attrs.end()) {
    std::istringstream is(it->second);
    std::string sender;
    uint64_t highest = 0;
    while (is >> sender >> highest) replay_.Restore(sender, highest);
  }
  return Status::OK();
}

void GossipNode::StartRunning() {
  running_ = true;
  averager_->CancelPulls();  // a late answer would replace the model it now trains
  next_tick_at_ = env_.NowSeconds() + options_.period_s;
}

size_t GossipNode::peers_alive() const {
  const size_t n = membership_->LiveIds().size();
  return n > 0 ? n - 1 : 0;
}

std::optional<std::string> GossipNode::IdForCurveKey(const std::string& curve_public_z85) const {
  for (const auto& [name, p] : allowlist_) {
    if (p.curve_public_z85() == curve_public_z85) return name;
  }
  return std::nullopt;
}

void GossipNode::SetAllowlist(std::vector<PublicIdentity> allowlist) {
  allowlist_.clear();
  for (const auto& p : allowlist) allowlist_[p.name] = p;
  membership_->SetAllowlist(std::move(allowlist));
}

wire::Header GossipNode::NextHeader() {
  wire::Header h;
  h.federation_id = options_.federation_id;
  h.sender_id = id_;
  h.round = averager_->step();
  h.model_version = averager_->step();
  h.message_id = next_sequence_++;
  return h;
}

void GossipNode::QueueMembership() {
  for (MembershipSend& s : membership_->TakeSends()) {
    sends_.push_back({std::move(s.to), wire::Message{NextHeader(), std::move(s.message)}});
  }
}

void GossipNode::QueueModels(std::vector<ModelSend> sends) {
  for (ModelSend& s : sends) {
    wire::Header h = NextHeader();
    s.message.sequence = h.message_id;
    s.message.model_sha256 = options_.model_sha256;
    if (!SignModel(identity_, options_.federation_id, &s.message).ok()) continue;  // no libsodium
    sends_.push_back({std::move(s.to), wire::Message{std::move(h), std::move(s.message)}});
  }
}

Status GossipNode::OnMessage(const std::string& from, const wire::Message& message) {
  if (message.header.federation_id != options_.federation_id) {
    ++drops_.wrong_federation;
    return Status::PermissionDenied("message from " + from + " names federation " +
                                    message.header.federation_id);
  }
  if (message.header.sender_id != from) {
    ++drops_.spoofed_sender;
    return Status::PermissionDenied("message from " + from + " claims to be from " +
                                    message.header.sender_id);
  }
  Status s;
  if (const auto* m = std::get_if<wire::Membership>(&message.body)) {
    s = membership_->OnMessage(from, *m);
    if (s.code() == StatusCode::kPermissionDenied) ++drops_.not_allowlisted;
    QueueMembership();
  } else if (const auto* g = std::get_if<wire::GossipModel>(&message.body)) {
    s = OnModel(from, *g);
  } else {
    ++drops_.malformed;
    s = Status::InvalidArgument("gossip peer " + from + " sent a " +
                                std::string(wire::MessageTypeName(wire::TypeOf(message.body))));
  }
  return s;
}

Status GossipNode::OnModel(const std::string& from, const wire::GossipModel& model) {
  auto signer = allowlist_.find(from);
  if (signer == allowlist_.end()) {
    ++drops_.not_allowlisted;
    return Status::PermissionDenied("gossip model from " + from + ", who is not allowlisted");
  }
  if (Status v = VerifyModel(signer->second, options_.federation_id, model); !v.ok()) {
    ++(model.signature.empty() ? drops_.unsigned_model : drops_.bad_signature);
    return v;
  }
  if (model.model_sha256 != options_.model_sha256) {
    ++drops_.wrong_model;
    auto name = [](const std::string& h) { return h.empty() ? std::string("a built-in model") : "graph " + h; };
    return Status::FailedPrecondition("gossip model from " + from + " runs " +
                                      name(model.model_sha256) + ", this site runs " +
                                      name(options_.model_sha256));
  }
  if (!replay_.Accept(from, model.sequence)) {
    ++drops_.replayed;
    return Status::AlreadyExists("gossip model " + std::to_string(model.sequence) + " from " +
                                 from + " was seen before (replay)");
  }
  // A reply replaces the model outright: only the peers asked may send one, and only while
  // this node still waits (StartRunning forgets the requests).
  if (model.kind == wire::GossipKind::kPullReply && !averager_->PullOutstanding(from)) {
    ++drops_.unsolicited;
    return Status::FailedPrecondition("PullReply from " + from +
                                      ", which this node did not ask for its model (or no "
                                      "longer waits for)");
  }
  // While joining, only the pull exchange matters: mixing pushes into a model that is about
  // to be replaced by a neighbour's would be wasted (and a restarted peer's stale push
  // would be adopted as if current).
  const bool pull = model.kind == wire::GossipKind::kPullRequest ||
                    model.kind == wire::GossipKind::kPullReply;
  if (!running_ && !pull) return Status::OK();
  auto replies = averager_->OnModel(from, model, membership_->LiveIds());
  if (!replies.ok()) {
    ++drops_.malformed;
    return replies.status();
  }
  QueueModels(std::move(*replies));
  if (!running_ && model.kind == wire::GossipKind::kPullReply) StartRunning();
  return Status::OK();
}

void GossipNode::OnTimer() {
  membership_->OnTimer();
  QueueMembership();
  if (running_) return;
  const double now = env_.NowSeconds();
  if (now >= started_at_ + options_.join_pull_timeout_s) {
    StartRunning();  // nobody answered: the first node of a federation starts on its own
    return;
  }
  if (now < next_pull_at_) return;
  std::vector<std::string> peers;
  for (auto& id : membership_->LiveIds()) {
    if (id != id_) peers.push_back(std::move(id));
  }
  if (peers.empty()) return;
  // Ask one random live neighbour; ask another each period until one answers.
  std::vector<ModelSend> one;
  one.push_back(averager_->PullRequest(peers[env_.rng().UniformInt(peers.size())]));
  QueueModels(std::move(one));
  next_pull_at_ = now + options_.period_s;
}

double GossipNode::NextTimerAt() const {
  double t = membership_->NextTimerAt();
  if (running_) {
    t = std::min(t, next_tick_at_);
  } else {
    t = std::min({t, next_pull_at_, started_at_ + options_.join_pull_timeout_s});
  }
  return t;
}

bool GossipNode::TickDue() const { return running_ && env_.NowSeconds() >= next_tick_at_; }

void GossipNode::Tick() {
  QueueModels(averager_->OnTick(membership_->LiveIds()));
  // Fixed-rate ticks; a driver that fell behind (a long training step) skips, not bursts.
  next_tick_at_ += options_.period_s;
  if (next_tick_at_ <= env_.NowSeconds()) next_tick_at_ = env_.NowSeconds() + options_.period_s;
}

std::vector<GossipSend> GossipNode::TakeSends() {
  std::vector<GossipSend> out;
  out.swap(sends_);
  return out;
}

NodeCheckpoint GossipNode::Checkpoint() const {
  NodeCheckpoint cp;
  Averager::State state = averager_->Snapshot();
  cp.model = std::move(state.x);
  cp.model_version = state.step;
  if (!state.x_hat.empty()) cp.tensors[kXHat] = std::move(state.x_hat);
  char weight[40];
  std::snprintf(weight, sizeof(weight), "%.17g", state.weight);
  cp.attributes[kWeight] = weight;
  cp.attributes[kSequence] = std::to_string(next_sequence_ - 1);
  cp.attributes[kIncarnation] = std::to_string(membership_->incarnation());
  cp.attributes[kMembers] = EncodeMembers(membership_->Snapshot());
  std::string replay;
  for (const auto& [sender, highest] : replay_.Highest()) {
    replay += sender + " " + std::to_string(highest) + "\n";
  }
  cp.attributes[kReplay] = replay;
  return cp;
}

}  // namespace fedmesh
