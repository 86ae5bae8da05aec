// ReplayWindow: drops a signed gossip message seen before. Each sender's sequence numbers
// only grow (the node starts them above both its checkpoint and the wall clock in
// microseconds, so a restart, even without its database, never reuses one). Links are
// FIFO, but a sender's messages to us may cross different paths (an Exchange and a Push),
// so a sliding window of the last 64 sequence numbers, as IPsec's anti-replay window,
// accepts mild reordering and refuses any number seen or older than the window.
// Thread-safety: not thread-safe; one per receiving node.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace fedmesh {

class ReplayWindow {
 public:
  static constexpr uint64_t kWidth = 64;

  // True (and remembered) when `sequence` from `sender` is new: above the highest seen, or
  // within the window below it and not seen yet. False for a replay or a stale number.
  bool Accept(const std::string& sender, uint64_t sequence);

  // Highest sequence accepted from `sender`; 0 if none.
  uint64_t highest(const std::string& sender) const;
  // Restores a sender's highest sequence (from a checkpoint): everything at or below it is
  // refused afterwards.
  void Restore(const std::string& sender, uint64_t highest);
  // Every sender's highest accepted sequence (for the checkpoint).
  std::map<std::string, uint64_t> Highest() const;

 private:
  struct Window {
    uint64_t highest = 0;
    uint64_t seen = 0;  // bit i: highest - i was accepted
  };
  std::map<std::string, Window> windows_;
};

}  // namespace fedmesh
