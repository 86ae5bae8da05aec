#include "sim/mpi/rank_group.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace fedmesh {
namespace {

// MPI counts are ints: payloads go in pieces of at most this many bytes.
constexpr uint64_t kMaxPiece = uint64_t{1} << 30;
// A broadcast's first piece: its size, then up to this many bytes less 8 of the payload.
constexpr uint64_t kFirstPiece = uint64_t{64} << 10;

Status MpiError(int rc, const char* what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status::Unavailable(std::string(what) +
                             " failed: " + std::string(text, static_cast<size_t>(len)));
}

// Polls `request` until it completes, sleeping briefly between tests (MPI_Wait would spin
// a core the rank's own workers need).
int PollUntilDone(MPI_Request& request) {
  auto pause = std::chrono::microseconds(10);
  for (;;) {
    int done = 0;
    if (int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS || done) return rc;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::microseconds(100));
  }
}

// Waits for `request` while this thread runs idle() (training the rank's own clients). A
// large message moves only while both sides call into MPI (rendezvous, then fragments), and
// one idle() call trains a whole client: so a helper thread keeps testing the request
// meanwhile (the two threads never call MPI at once: MPI_THREAD_SERIALIZED).
Status Await(MPI_Request& request, const std::function<bool()>& idle, bool helper_allowed,
             const char* what) {
  int rc = MPI_SUCCESS;
  if (!idle || !helper_allowed) {
    rc = PollUntilDone(request);
  } else {
    std::atomic<bool> done{false};
    std::thread helper([&] {
      rc = PollUntilDone(request);
      done = true;
    });
    auto pause = std::chrono::microseconds(10);
    while (!done) {
      if (idle()) {
        pause = std::chrono::microseconds(10);
        continue;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::microseconds(100));
    }
    helper.join();
  }
  return rc == MPI_SUCCESS ? Status::OK() : MpiError(rc, what);
}

}  // namespace

Result<std::unique_ptr<MpiRankGroup>> MpiRankGroup::Create(int* argc, char*** argv) {
  int provided = 0;
  if (int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided); rc != MPI_SUCCESS) {
    return Status::Unavailable("MPI_Init_thread failed (code " + std::to_string(rc) + ")");
  }
  // Errors come back as codes, to be reported as a Status, instead of aborting in MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::unique_ptr<MpiRankGroup> g(new MpiRankGroup());
  g->helper_allowed_ = provided >= MPI_THREAD_SERIALIZED;
  MPI_Comm_rank(MPI_COMM_WORLD, &g->rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &g->size_);
  MPI_Comm local;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) ==
      MPI_SUCCESS) {
    MPI_Comm_size(local, &g->local_size_);
    MPI_Comm_free(&local);
  }
  return g;
}

MpiRankGroup::~MpiRankGroup() { MPI_Finalize(); }

Status MpiRankGroup::Broadcast(int root, std::vector<uint8_t>& bytes,
                               const std::function<bool()>& idle) {
  // One fixed-size first piece carries the size and the start of the payload: an answer of
  // a few kilobytes (a sparsified update) takes one collective, not a size and then a body.
  std::vector<uint8_t> first(kFirstPiece);
  uint64_t n = bytes.size();
  if (rank_ == root) {
    std::memcpy(first.data(), &n, sizeof n);
    std::memcpy(first.data() + sizeof n, bytes.data(),
                std::min<uint64_t>(n, kFirstPiece - sizeof n));
  }
  MPI_Request request;
  if (int rc = MPI_Ibcast(first.data(), static_cast<int>(kFirstPiece), MPI_BYTE, root,
                          MPI_COMM_WORLD, &request);
      rc != MPI_SUCCESS) {
    return MpiError(rc, "MPI_Ibcast");
  }
  FM_RETURN_IF_ERROR(Await(request, idle, helper_allowed_, "MPI_Ibcast"));
  if (rank_ != root) {
    std::memcpy(&n, first.data(), sizeof n);
    bytes.resize(n);
    std::memcpy(bytes.data(), first.data() + sizeof n,
                std::min<uint64_t>(n, kFirstPiece - sizeof n));
  }
  for (uint64_t at = kFirstPiece - sizeof n; at < n; at += kMaxPiece) {
    const int piece = static_cast<int>(std::min(kMaxPiece, n - at));
    if (int rc = MPI_Ibcast(bytes.data() + at, piece, MPI_BYTE, root, MPI_COMM_WORLD, &request);
        rc != MPI_SUCCESS) {
      return MpiError(rc, "MPI_Ibcast");
    }
    FM_RETURN_IF_ERROR(Await(request, idle, helper_allowed_, "MPI_Ibcast"));
  }
  return Status::OK();
}

Result<std::vector<std::vector<uint8_t>>> MpiRankGroup::Allgather(std::span<const uint8_t> bytes) {
  // Small payloads only (evaluation figures, counters): one MPI_Allgatherv.
  if (bytes.size() > kMaxPiece) return Status::OutOfRange("Allgather of more than 1 GiB");
  const int n = static_cast<int>(bytes.size());
  std::vector<int> counts(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
  if (int rc = MPI_Allgather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
      rc != MPI_SUCCESS) {
    return MpiError(rc, "MPI_Allgather");
  }
  uint64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = static_cast<int>(total);
    total += static_cast<uint64_t>(counts[r]);
  }
  if (total > kMaxPiece) return Status::OutOfRange("Allgather of more than 1 GiB");
  std::vector<uint8_t> all(total);
  if (int rc = MPI_Allgatherv(bytes.data(), n, MPI_BYTE, all.data(), counts.data(), offsets.data(),
                              MPI_BYTE, MPI_COMM_WORLD);
      rc != MPI_SUCCESS) {
    return MpiError(rc, "MPI_Allgatherv");
  }
  std::vector<std::vector<uint8_t>> parts(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) {
    parts[r].assign(all.begin() + offsets[r], all.begin() + offsets[r] + counts[r]);
  }
  return parts;
}

void MpiRankGroup::Abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

}  // namespace fedmesh
