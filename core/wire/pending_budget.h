// PendingBudget: one byte budget shared by several Reassemblers (a server's peers), so
// that partial uploads from all peers together hold at most `limit` declared payload
// bytes, whatever each peer declares. A Reassembler reserves a message's declared size
// when its header frame arrives and releases it when the message completes, is dropped, or
// the Reassembler is destroyed.
//
// Thread-safety: none; the Reassemblers sharing it and its owner run on one thread.
#pragma once

#include <cstdint>

namespace fedmesh::wire {

class PendingBudget {
 public:
  explicit PendingBudget(uint64_t limit) : limit_(limit) {}

  // Reserves `bytes` when they fit; false (nothing reserved) otherwise.
  bool TryReserve(uint64_t bytes) {
    if (bytes > limit_ - used_) return false;
    used_ += bytes;
    return true;
  }
  void Release(uint64_t bytes) { used_ -= bytes < used_ ? bytes : used_; }

  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_; }

 private:
  uint64_t limit_;
  uint64_t used_ = 0;
};

}  // namespace fedmesh::wire
