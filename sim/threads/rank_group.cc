#include "sim/threads/rank_group.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "core/check.h"

namespace fedmesh {

struct ThreadRankGroup::Hub {
  // One collective in progress: what each rank deposited, and how many have read it.
  struct Entry {
    int root = 0;
    std::vector<std::vector<uint8_t>> parts;
    int deposited = 0;
    int left = 0;
  };
  explicit Hub(int n) : ranks(n) {}
  const int ranks;
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Entry> entries;  // by collective number
  bool aborted = false;
};

std::vector<std::unique_ptr<ThreadRankGroup>> ThreadRankGroup::Create(int ranks) {
  FM_CHECK_GE(ranks, 1);
  auto hub = std::make_shared<Hub>(ranks);
  std::vector<std::unique_ptr<ThreadRankGroup>> groups;
  for (int r = 0; r < ranks; ++r) groups.push_back(std::make_unique<ThreadRankGroup>(hub, r));
  return groups;
}

ThreadRankGroup::ThreadRankGroup(std::shared_ptr<Hub> hub, int rank)
    : hub_(std::move(hub)), rank_(rank) {}

int ThreadRankGroup::size() const { return hub_->ranks; }

Result<std::vector<std::vector<uint8_t>>> ThreadRankGroup::Exchange(
    int root, std::vector<uint8_t> bytes, const std::function<bool()>& idle) {
  Hub& h = *hub_;
  const uint64_t seq = seq_++;
  std::unique_lock<std::mutex> lock(h.mu);
  if (h.aborted) return Status::Unavailable("another rank of the group failed");
  auto [it, fresh] = h.entries.try_emplace(seq);
  Hub::Entry& e = it->second;
  if (fresh) {
    e.root = root;
    e.parts.resize(static_cast<size_t>(h.ranks));
  }
  FM_CHECK_EQ(e.root, root);  // every rank must be in the same collective
  e.parts[static_cast<size_t>(rank_)] = std::move(bytes);
  if (++e.deposited == h.ranks) h.cv.notify_all();
  while (e.deposited < h.ranks && !h.aborted) {
    lock.unlock();
    const bool worked = idle && idle();
    lock.lock();
    if (!worked) {
      h.cv.wait_for(lock, std::chrono::milliseconds(1),
                    [&] { return e.deposited == h.ranks || h.aborted; });
    }
  }
  if (e.deposited < h.ranks) return Status::Unavailable("another rank of the group failed");
  std::vector<std::vector<uint8_t>> parts =
      root >= 0 ? std::vector<std::vector<uint8_t>>{e.parts[static_cast<size_t>(root)]} : e.parts;
  if (++e.left == h.ranks) h.entries.erase(it);
  return parts;
}

Status ThreadRankGroup::Broadcast(int root, std::vector<uint8_t>& bytes,
                                  const std::function<bool()>& idle) {
  FM_CHECK(root >= 0 && root < size());
  FM_ASSIGN_OR_RETURN(auto parts,
                      Exchange(root, root == rank_ ? bytes : std::vector<uint8_t>{}, idle));
  if (root != rank_) bytes = std::move(parts[0]);
  return Status::OK();
}

Result<std::vector<std::vector<uint8_t>>> ThreadRankGroup::Allgather(
    std::span<const uint8_t> bytes) {
  return Exchange(-1, std::vector<uint8_t>(bytes.begin(), bytes.end()), {});
}

void ThreadRankGroup::Abort(int) {
  std::lock_guard<std::mutex> lock(hub_->mu);
  hub_->aborted = true;
  hub_->cv.notify_all();
}

}  // namespace fedmesh
