#include "gossip/replay_window.h"

namespace fedmesh {

bool ReplayWindow::Accept(const std::string& sender, uint64_t sequence) {
  Window& w = windows_[sender];
  if (w.seen == 0 && w.highest == 0) {  // first message from this sender
    w.highest = sequence;
    w.seen = 1;
    return true;
  }
  if (sequence > w.highest) {
    const uint64_t shift = sequence - w.highest;
    w.seen = shift >= kWidth ? 1 : (w.seen << shift) | 1;
    w.highest = sequence;
    return true;
  }
  const uint64_t age = w.highest - sequence;
  if (age >= kWidth) return false;  // too old to tell: refuse
  const uint64_t bit = uint64_t{1} << age;
  if (w.seen & bit) return false;
  w.seen |= bit;
  return true;
}

uint64_t ReplayWindow::highest(const std::string& sender) const {
  auto it = windows_.find(sender);
  return it == windows_.end() ? 0 : it->second.highest;
}

void ReplayWindow::Restore(const std::string& sender, uint64_t highest) {
  Window& w = windows_[sender];
  w.highest = highest;
  w.seen = ~uint64_t{0};  // the whole window below a restored high-water mark counts as seen
}

std::map<std::string, uint64_t> ReplayWindow::Highest() const {
  std::map<std::string, uint64_t> out;
  for (const auto& [sender, w] : windows_) out[sender] = w.highest;
  return out;
}

}  // namespace fedmesh
