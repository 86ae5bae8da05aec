#include "collective/elastic_ring.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

namespace fedmesh::collective {
namespace {

// Control chunks: OpKind::kMessage with this operation number; the bytes are a type byte,
// then little-endian fields (SendJoin, the VIEW in Form).
constexpr uint64_t kControlOp = 0xE1A571C0u;
constexpr uint8_t kJoin = 1;
constexpr uint8_t kView = 2;
constexpr size_t kMaxMembers = 1 << 16;

using Clock = std::chrono::steady_clock;

int MsLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, left));
}

void Put64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void Put32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
bool Get(std::string_view& in, uint64_t& v, int bytes) {
  if (in.size() < static_cast<size_t>(bytes)) return false;
  v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  in.remove_prefix(bytes);
  return true;
}
bool GetList(std::string_view& in, std::vector<int>& out, int members) {
  uint64_t n = 0;
  if (!Get(in, n, 4) || n > kMaxMembers) return false;
  out.clear();
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t m = 0;
    if (!Get(in, m, 4) || m >= static_cast<uint64_t>(members)) return false;
    out.push_back(static_cast<int>(m));
  }
  return std::is_sorted(out.begin(), out.end()) && std::adjacent_find(out.begin(), out.end()) == out.end();
}

bool Contains(const std::vector<int>& v, int x) { return std::binary_search(v.begin(), v.end(), x); }

bool IsControl(const Chunk& c) { return c.kind == OpKind::kMessage && c.op == kControlOp; }

}  // namespace

// The Communicator's transport for the current view: ring ranks are positions in the view.
// Chunks of the current view are delivered, of later views kept, of earlier ones dropped;
// a JOIN or VIEW that starts a re-forming abandons the operation (Unavailable).
class ElasticRing::ViewTransport final : public CollectiveTransport {
 public:
  explicit ViewTransport(ElasticRing* ring) : ring_(ring) {}

  Status Send(int to, Chunk chunk) override {
    if (to < 0 || to >= static_cast<int>(ring_->view_.size())) return Status::InvalidArgument("no ring rank " + std::to_string(to));
    return ring_->transport_->Send(ring_->view_[to], std::move(chunk));
  }

  Result<std::optional<std::pair<int, Chunk>>> Receive(int timeout_ms) override {
    if (!pending_.empty()) {
      auto front = std::move(pending_.front());
      pending_.pop_front();
      return std::optional<std::pair<int, Chunk>>(std::move(front));
    }
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      // A member whose JOIN was held while it was declared dead, alive again, joins now.
      if (!ring_->held_.empty() && ring_->ReleaseRevived()) {
        return Status::Unavailable("member " + std::to_string(ring_->backlog_.back().from) +
                                   ", alive again, is re-forming the ring");
      }
      FM_ASSIGN_OR_RETURN(auto got, ring_->transport_->Receive(ring_->Slice(MsLeft(deadline))));
      if (!got) {
        // Nothing came: what arrived is always taken first (a member that finished and left
        // may be declared dead while its last chunks still wait here).
        if (std::optional<int> dead = ring_->DeadInView()) {
          return Status::Unavailable("member " + std::to_string(*dead) + " was declared dead by the failure detector");
        }
        if (Clock::now() < deadline) continue;
        return std::optional<std::pair<int, Chunk>>();
      }
      auto& [from, chunk] = *got;
      if (IsControl(chunk)) {
        std::optional<Control> c = Decode(from, chunk, ring_->members_);
        if (!c) continue;
        // A member outside the view wants in, or a member re-forms at a later generation.
        const bool outsider = !Contains(ring_->view_, c->from);
        if (c->generation > ring_->generation_ || (outsider && c->type == kJoin)) {
          if (ring_->HoldIfDead(*c)) continue;
          ring_->backlog_.push_back(std::move(*c));
          return Status::Unavailable("member " + std::to_string(from) + " is re-forming the ring");
        }
        continue;
      }
      if (chunk.generation == ring_->tag_) {
        auto it = std::lower_bound(ring_->view_.begin(), ring_->view_.end(), from);
        if (it == ring_->view_.end() || *it != from) continue;
        return std::optional<std::pair<int, Chunk>>(
            std::make_pair(static_cast<int>(it - ring_->view_.begin()), std::move(chunk)));
      }
      if ((chunk.generation >> 32) > ring_->generation_) ring_->later_[chunk.generation].emplace_back(from, std::move(chunk));
    }
  }

  static std::optional<Control> Decode(int from, const Chunk& chunk, int members) {
    std::string_view in = chunk.bytes.view();
    Control c;
    c.from = from;
    c.generation = chunk.generation;
    uint64_t type = 0, completed = 0, joining = 0;
    if (!Get(in, type, 1) || !Get(in, completed, 8) || !Get(in, joining, 1)) return std::nullopt;
    c.type = static_cast<uint8_t>(type);
    c.completed = completed;
    c.joining = joining != 0;
    if (c.type == kView) {
      if (!GetList(in, c.members, members) || !GetList(in, c.joiners, members)) return std::nullopt;
    } else if (c.type != kJoin) {
      return std::nullopt;
    }
    if (!in.empty() || from < 0 || from >= members) return std::nullopt;
    return c;
  }

  std::deque<std::pair<int, Chunk>> pending_;  // ring rank, chunk: arrived before the view was adopted

 private:
  ElasticRing* ring_;
};

ElasticRing::ElasticRing(const ElasticOptions& o, int members, int me, CollectiveTransport* t)
    : options_(o), members_(members), me_(me), transport_(t) {}

ElasticRing::~ElasticRing() = default;

Result<std::unique_ptr<ElasticRing>> ElasticRing::Create(const ElasticOptions& options, int members, int me,
                                                         CollectiveTransport* transport) {
  if (transport == nullptr) return Status::InvalidArgument("ElasticRing needs a transport");
  if (members < 1 || static_cast<size_t>(members) > kMaxMembers || me < 0 || me >= members) {
    return Status::InvalidArgument("ElasticRing: member " + std::to_string(me) + " of " + std::to_string(members));
  }
  if (options.reform_window_ms <= 0 || options.start_window_ms <= 0 || options.min_members < 1 ||
      options.max_attempts < 1) {
    return Status::InvalidArgument(
        "ElasticOptions: reform_window_ms, start_window_ms, min_members and max_attempts must be positive");
  }
  std::unique_ptr<ElasticRing> r(new ElasticRing(options, members, me, transport));
  r->view_transport_ = std::make_unique<ViewTransport>(r.get());
  return r;
}

uint64_t ElasticRing::Tag(uint64_t generation, const std::vector<int>& view) {
  uint32_t h = 2166136261u;  // FNV-1a over the member ids
  for (int m : view) {
    for (int i = 0; i < 4; ++i) {
      h ^= static_cast<uint32_t>((m >> (8 * i)) & 0xFF);
      h *= 16777619u;
    }
  }
  return (generation << 32) | h;
}

Status ElasticRing::SendJoin(uint64_t generation, uint64_t completed, bool joining) {
  std::string bytes(1, static_cast<char>(kJoin));
  Put64(bytes, completed);
  bytes.push_back(joining ? 1 : 0);
  for (int m = 0; m < members_; ++m) {
    if (m != me_) SendControl(m, generation, bytes);
  }
  return Status::OK();
}

void ElasticRing::SendControl(int to, uint64_t generation, const std::string& bytes) {
  Chunk c;
  c.kind = OpKind::kMessage;
  c.op = kControlOp;
  c.generation = generation;
  c.bytes = Payload(bytes);
  // A dead member's link may refuse; the others must still hear.
  (void)transport_->Send(to, std::move(c));
}

Result<std::optional<ElasticRing::Control>> ElasticRing::NextControl(int timeout_ms) {
  if (!backlog_.empty()) {
    Control c = std::move(backlog_.front());
    backlog_.pop_front();
    return std::optional<Control>(std::move(c));
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    FM_ASSIGN_OR_RETURN(auto got, transport_->Receive(MsLeft(deadline)));
    if (!got) return std::optional<Control>();
    auto& [from, chunk] = *got;
    if (IsControl(chunk)) {
      if (std::optional<Control> c = ViewTransport::Decode(from, chunk, members_)) return c;
      continue;
    }
    if ((chunk.generation >> 32) > generation_) later_[chunk.generation].emplace_back(from, std::move(chunk));
  }
}

bool ElasticRing::HoldIfDead(Control& c) {
  if (!DeclaredDead(c.from)) return false;
  if (c.type == kJoin) {
    auto it = held_.find(c.from);
    if (it == held_.end() || it->second.generation <= c.generation) held_[c.from] = std::move(c);
  }
  return true;
}

bool ElasticRing::ReleaseRevived() {
  bool reform = false;
  for (auto it = held_.begin(); it != held_.end();) {
    if (DeclaredDead(it->first)) {
      ++it;
      continue;
    }
    reform = reform || it->second.generation > generation_ || !Contains(view_, it->first);
    backlog_.push_back(std::move(it->second));
    it = held_.erase(it);
  }
  return reform;
}

std::optional<int> ElasticRing::DeadInView() const {
  if (!options_.dead) return std::nullopt;
  for (int m : view_) {
    if (m != me_ && options_.dead(m)) return m;
  }
  return std::nullopt;
}

Result<ViewChange> ElasticRing::Join() { return Form(0, /*joining=*/true, options_.start_window_ms); }

Result<ViewChange> ElasticRing::Reform(uint64_t completed, bool joining) {
  ++reforms_;
  return Form(completed, joining, options_.reform_window_ms);
}

Result<ViewChange> ElasticRing::Form(uint64_t completed, bool joining, int window_ms) {
  uint64_t target = generation_ + 1;
  std::map<int, std::pair<uint64_t, bool>> heard;  // member -> (completed, joining)
  const auto restart = [&](uint64_t generation) {
    target = generation;
    heard.clear();
    heard[me_] = {completed, joining};
  };
  restart(target);
  for (const Control& c : backlog_) target = std::max(target, c.generation);
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    FM_RETURN_IF_ERROR(SendJoin(target, completed, joining));
    auto deadline = Clock::now() + std::chrono::milliseconds(window_ms);
    std::optional<Control> adopted;
    // Phase 1: collect JOINs until every member answered or the window closed; adopt a
    // VIEW that lists this member.
    // Every member answered, or (with a detector) every member it has not declared dead.
    const auto all_heard = [&] {
      for (int m = 0; m < members_; ++m) {
        if (heard.count(m) == 0 && !DeclaredDead(m)) return false;
      }
      return true;
    };
    while (!adopted && !all_heard() && Clock::now() < deadline) {
      ReleaseRevived();
      FM_ASSIGN_OR_RETURN(std::optional<Control> c, NextControl(Slice(MsLeft(deadline))));
      if (!c || HoldIfDead(*c)) continue;
      if (c->type == kJoin) {
        if (c->generation > target) {
          restart(c->generation);
          FM_RETURN_IF_ERROR(SendJoin(target, completed, joining));
          deadline = Clock::now() + std::chrono::milliseconds(window_ms);
        }
        if (c->generation == target) heard[c->from] = {c->completed, c->joining};
      } else if (c->generation >= target) {
        if (Contains(c->members, me_)) {
          adopted = std::move(*c);
        } else {
          restart(c->generation + 1);
          FM_RETURN_IF_ERROR(SendJoin(target, completed, joining));
          deadline = Clock::now() + std::chrono::milliseconds(window_ms);
        }
      }
    }
    if (adopted) return Adopt(*adopted, completed);
    // Members the detector declared dead since they answered are left out.
    for (auto it = heard.begin(); it != heard.end();) it = DeclaredDead(it->first) ? heard.erase(it) : std::next(it);
    const int proposer = heard.begin()->first;
    if (proposer == me_) {
      // The lowest member heard proposes the view.
      Control view;
      view.type = kView;
      view.generation = target;
      uint64_t max_completed = 0;
      bool stateful = false;
      for (const auto& [m, s] : heard) {
        view.members.push_back(m);
        if (!s.second) {
          max_completed = std::max(max_completed, s.first);
          stateful = true;
        }
      }
      // Members with state are at most one step apart; one further behind joins afresh.
      uint64_t step = max_completed;
      for (const auto& [m, s] : heard) {
        if (s.second || !stateful || s.first + 1 < max_completed) continue;
        step = std::min(step, s.first);
      }
      for (const auto& [m, s] : heard) {
        const bool has_state = stateful ? (!s.second && s.first + 1 >= max_completed) : m == heard.begin()->first;
        if (!has_state) view.joiners.push_back(m);
      }
      view.completed = stateful ? step : 0;
      view.joining = !stateful;
      std::string bytes(1, static_cast<char>(kView));
      Put64(bytes, view.completed);
      bytes.push_back(view.joining ? 1 : 0);
      Put32(bytes, static_cast<uint32_t>(view.members.size()));
      for (int m : view.members) Put32(bytes, static_cast<uint32_t>(m));
      Put32(bytes, static_cast<uint32_t>(view.joiners.size()));
      for (int m : view.joiners) Put32(bytes, static_cast<uint32_t>(m));
      for (int m : view.members) {
        if (m != me_) SendControl(m, target, bytes);
      }
      view.from = me_;
      return Adopt(view, completed);
    }
    // Phase 2: wait for the lowest member's VIEW.
    deadline = Clock::now() + std::chrono::milliseconds(2 * window_ms);
    bool restarted = false;
    while (!adopted && !restarted && Clock::now() < deadline) {
      if (DeclaredDead(proposer)) break;  // it will never propose: the next generation
      FM_ASSIGN_OR_RETURN(std::optional<Control> c, NextControl(Slice(MsLeft(deadline))));
      if (!c || HoldIfDead(*c)) continue;
      if (c->type == kJoin && c->generation > target) {
        restart(c->generation);
        heard[c->from] = {c->completed, c->joining};
        restarted = true;
      } else if (c->type == kView && c->generation >= target) {
        if (Contains(c->members, me_)) {
          adopted = std::move(*c);
        } else {
          restart(c->generation + 1);
          restarted = true;
        }
      }
    }
    if (adopted) return Adopt(*adopted, completed);
    if (!restarted) restart(target + 1);  // no view came: try the next generation
  }
  return Status::Unavailable("could not re-form the ring after " + std::to_string(options_.max_attempts) +
                             " attempts (generation " + std::to_string(target) + ")");
}

Result<ViewChange> ElasticRing::Adopt(const Control& view, uint64_t completed) {
  if (view.members.size() < static_cast<size_t>(options_.min_members)) {
    return Status::FailedPrecondition("the ring re-formed with " + std::to_string(view.members.size()) +
                                      " members; at least " + std::to_string(options_.min_members) +
                                      " are needed (min_members)");
  }
  view_ = view.members;
  generation_ = view.generation;
  tag_ = Tag(generation_, view_);
  const int position = static_cast<int>(std::lower_bound(view_.begin(), view_.end(), me_) - view_.begin());
  CommunicatorOptions co = options_.comm;
  co.ring.size = static_cast<int>(view_.size());
  co.ring.rank = position;
  co.ring.generation = tag_;
  FM_ASSIGN_OR_RETURN(comm_, Communicator::Create(co, view_transport_.get()));
  view_transport_->pending_.clear();
  for (auto& [from, chunk] : later_[tag_]) {
    auto it = std::lower_bound(view_.begin(), view_.end(), from);
    if (it != view_.end() && *it == from)
      view_transport_->pending_.emplace_back(static_cast<int>(it - view_.begin()), std::move(chunk));
  }
  later_.erase(later_.begin(), later_.upper_bound((generation_ << 32) | 0xFFFFFFFFu));
  // Control messages of this generation or earlier are answered by this view.
  std::erase_if(backlog_, [&](const Control& c) {
    return c.generation <= generation_ && (c.type == kView || Contains(view_, c.from));
  });
  std::erase_if(held_, [&](const auto& h) { return h.second.generation <= generation_ && Contains(view_, h.first); });
  ViewChange vc;
  vc.generation = generation_;
  vc.members = view_;
  vc.step = view.completed;
  vc.joiner = Contains(view.joiners, me_);
  vc.broadcast = !view.joiners.empty();
  vc.fresh = view.joining;
  vc.rollback = !vc.joiner && completed == view.completed + 1;
  for (size_t i = 0; i < view_.size(); ++i) {
    if (!Contains(view.joiners, view_[i])) {
      vc.source = static_cast<int>(i);
      break;
    }
  }
  return vc;
}

}  // namespace fedmesh::collective
