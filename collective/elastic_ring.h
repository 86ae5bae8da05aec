// ElasticRing: a ring of a fixed group's members whose view changes when members die or
// come back (docs/collectives.md, "Elastic membership"). Each view has a generation; every
// chunk carries a tag made of the generation and a hash of the view, so ranks that disagree
// on the view never combine values, they time out and re-form again.
//
// Re-forming (Reform, or Join at start): a member sends JOIN(generation, completed steps,
// joining) to every member of the group and collects the others' for a window (all of them
// at start, reform_window_ms after a failure; a JOIN of a higher generation restarts the
// window at that generation). When the window closes, the lowest member heard proposes the
// VIEW: the members heard, the step to go on from (the lowest `completed` among the members
// that carry state; ranks are never more than one step apart, so the others are exactly one
// ahead and roll back) and which members join without state (restarted, or left behind by
// more than a step) and must take the state of a member that has it. The others adopt the
// first VIEW of the generation they are forming (or a higher one) that lists them; one that
// does not list them, or none in time, makes them try the next generation, which pulls the
// ring into a new re-forming. A member of a running ring that receives a JOIN of a higher
// generation abandons its operation (the ring's transport returns Unavailable) and re-forms.
// What a view change means for training (rollback, broadcast) is collective/elastic_steps.h.
//
// Control messages travel as OpKind::kMessage chunks on the ring's transport; data chunks of
// a view not yet adopted are kept for it, those of older views dropped.
// Thread-safety: one thread drives an ElasticRing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collective/collective_transport.h"
#include "collective/communicator.h"

namespace fedmesh::collective {

struct ElasticOptions {
  // Every view's Communicator: chunk size, wire type, fusion and the per-operation timeout
  // (a member silent that long is taken for dead). ring.size, ring.rank and ring.generation
  // are set per view.
  CommunicatorOptions comm;
  // After a failure: how long a member collects the others' JOINs before the lowest one
  // proposes a view (a dead member never answers, so re-forming takes about this long).
  // Default: 2,000 ms.
  int reform_window_ms = 2000;
  // At start: how long to wait for every member before the ring starts with those present
  // (the rest join when they come). Default: 60,000 ms.
  int start_window_ms = 60000;
  // A view with fewer members fails the run. Default: 1 (a last member trains alone).
  int min_members = 1;
  // Attempts at one re-forming before it fails. Default: 20.
  int max_attempts = 20;
  // A failure detector beside the ring (SWIM: node/ring_liveness.h): true for a member it
  // has declared dead. Set, an operation whose view holds a member declared dead stops
  // within dead_poll_ms instead of waiting comm.timeout_ms for it, a re-forming closes its
  // window as soon as every member not declared dead has answered and leaves such members
  // out of the view, and their JOINs wait until the detector sees them alive again. Called on
  // the ring's thread while the detector runs on its own: it must be thread-safe. Default:
  // none.
  std::function<bool(int member)> dead;
  // How often a wait asks `dead`. Default: 50 ms.
  int dead_poll_ms = 50;
};

// What the members agreed when the ring (re)formed, from this member's side.
struct ViewChange {
  uint64_t generation = 0;
  std::vector<int> members;  // the view: member ids, ascending; ring rank = position
  uint64_t step = 0;         // the step the ring goes on from
  bool rollback = false;     // this member completed step + 1 and must undo it
  bool joiner = false;       // this member has no state and takes `source`'s
  bool broadcast = false;    // somebody joins: every member takes `source`'s state
  int source = 0;            // ring rank whose state is broadcast
  bool fresh = false;        // no member had state: the ring starts (from `source`'s)
};

class ElasticRing {
 public:
  // `members` is the group's size, `me` this member's id in it; `transport` addresses
  // members by id. REQUIRES: transport outlives the ring.
  static Result<std::unique_ptr<ElasticRing>> Create(const ElasticOptions& options, int members, int me,
                                                     CollectiveTransport* transport);
  ~ElasticRing();

  // Forms the first view, or joins a running ring, as a member without state.
  Result<ViewChange> Join();
  // After a failed operation: re-forms with the members that answer. `completed`: the steps
  // this member completed; `joining`: it has no state yet (it never took the ring's), so it
  // must take it. Fails when fewer than min_members remain or after max_attempts.
  Result<ViewChange> Reform(uint64_t completed, bool joining = false);

  // The current view's communicator. REQUIRES: Join succeeded.
  Communicator& comm() { return *comm_; }
  const std::vector<int>& view() const { return view_; }
  uint64_t generation() const { return generation_; }
  int me() const { return me_; }
  uint64_t reforms() const { return reforms_; }
  const ElasticOptions& options() const { return options_; }

 private:
  class ViewTransport;
  struct Control {
    int from = 0;
    uint8_t type = 0;  // kJoin / kView
    uint64_t generation = 0;
    uint64_t completed = 0;  // JOIN: steps completed; VIEW: the step to go on from
    bool joining = false;    // JOIN: no state; VIEW: no member had state (a fresh ring)
    std::vector<int> members, joiners;  // VIEW
  };

  ElasticRing(const ElasticOptions& o, int members, int me, CollectiveTransport* t);
  Result<ViewChange> Form(uint64_t completed, bool joining, int window_ms);
  // The next control message (data chunks of later views are kept), waiting up to ms.
  Result<std::optional<Control>> NextControl(int timeout_ms);
  Status SendJoin(uint64_t generation, uint64_t completed, bool joining);
  // A member of the current view the detector has declared dead, if any.
  std::optional<int> DeadInView() const;
  // Whether the detector has declared `member` dead (never this member itself).
  bool DeclaredDead(int member) const { return options_.dead && member != me_ && options_.dead(member); }
  // A control message from a member the detector declared dead: its JOIN is held (the
  // newest per member) until the detector sees it alive, its VIEW dropped (a member others
  // see as dead must not make this one adopt its view). Whether it was taken.
  bool HoldIfDead(Control& c);
  // Moves the held JOINs of members no longer declared dead to the backlog; whether one of
  // them asks the current view to re-form (a later generation, or an outsider).
  bool ReleaseRevived();
  // How long one wait may block before the detector is asked again.
  int Slice(int ms_left) const { return options_.dead ? std::min(ms_left, options_.dead_poll_ms) : ms_left; }
  void SendControl(int to, uint64_t generation, const std::string& bytes);
  Result<ViewChange> Adopt(const Control& view, uint64_t completed);
  static uint64_t Tag(uint64_t generation, const std::vector<int>& view);

  ElasticOptions options_;
  int members_ = 0;
  int me_ = 0;
  CollectiveTransport* transport_ = nullptr;
  std::unique_ptr<ViewTransport> view_transport_;
  std::unique_ptr<Communicator> comm_;
  std::vector<int> view_;
  uint64_t generation_ = 0;
  uint64_t tag_ = 0;
  uint64_t reforms_ = 0;
  // JOINs and VIEWs that arrived during an operation, for the next re-forming.
  std::deque<Control> backlog_;
  // JOINs of members the detector declared dead: not obeyed (a member others' SWIM cannot
  // reach would pull the ring into re-forming for ever) until it sees them alive again.
  std::map<int, Control> held_;  // by member
  // Data chunks of views not yet adopted, by tag.
  std::map<uint64_t, std::vector<std::pair<int, Chunk>>> later_;
};

}  // namespace fedmesh::collective
