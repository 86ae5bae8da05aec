// PsiParty: one side of two-party ECDH private set intersection over ristretto255, as a
// sans-IO state machine: Start() gives the messages to send, Receive() takes the peer's and
// gives the replies, until done().
//
// Protocol (both parties run it at once; a, b are their secret scalars, H hashes an id to
// the group, crypto/psi/ristretto_points.h):
//   1. A sends a·H(x) for its ids x, in an order it shuffled secretly, with a nonce.
//   2. B returns b·(a·H(x)) in the order received; A maps them back to its ids.
//   3. A holds ab·H(x) for its own ids and, having done step 2 for B, ab·H(y) for B's
//      (whose order only B knows). The ids whose ab·H values meet are the intersection.
//   4. Both order the intersection alike: sorted by ab·H value, then shuffled by a seed from
//      both nonces (and PsiOptions::order_seed); each sends the SHA-256 of the ordered
//      ab·H values and checks the peer's, so a mismatch in set or order is an error, never
//      misaligned rows.
// What each party learns (semi-honest parties): the size of the other's set, and which of
// its own ids are in the intersection (so, the intersection). Not the other ids: a·H(y)
// without a looks random, and the other's shuffle hides which position is which. The wire
// carries no id. A party that deviates (returns other points) can make the result smaller
// or refused, not learn more ids than it could by querying with ids it holds; PSI cannot stop a
// party from putting guessed ids in its own set.
// Thread-safety: one thread drives a party; blinding uses all OpenMP threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "crypto/psi/psi_messages.h"
#include "crypto/psi/ristretto_points.h"
#include "crypto/secure_buffer.h"

namespace fedmesh::psi {

struct PsiOptions {
  // Most ids either party may hold: a larger set is refused here, and a peer claiming one is
  // refused before anything is allocated for it. Default 100,000,000 (3.2 GB of points).
  uint64_t max_ids = 100'000'000;
  // Points per message. Default 65,536 (2 MiB), under every transport's message limit.
  uint32_t batch = 65'536;
  // Mixed into the order of the result; both parties must give the same value (the digest
  // check refuses otherwise). Default 0.
  uint64_t order_seed = 0;
};

struct PsiResult {
  // Indices into this party's ids, in the agreed order: row k of every party's aligned
  // table is the same record.
  std::vector<uint64_t> rows;
  uint64_t my_count = 0;
  uint64_t peer_count = 0;
  // SHA-256 of the ordered intersection's ab·H values, hexadecimal: the same on both sides.
  std::string digest;
};

class PsiParty {
 public:
  // InvalidArgument when an id appears twice (naming it and both positions, from 1) or
  // there are more than options.max_ids ids.
  static Result<std::unique_ptr<PsiParty>> Create(std::span<const std::string> ids, const PsiOptions& options = {});
  ~PsiParty();

  // The messages to send first: this party's blinded ids, in batches. REQUIRES: once.
  Result<std::vector<std::string>> Start();
  // Handles one message from the peer, appending the replies to *out. Corruption for a
  // malformed message or one out of protocol order, or a confirm that disagrees;
  // InvalidArgument for points that are not group elements.
  Status Receive(std::string_view message, std::vector<std::string>* out);

  // Both sides computed the intersection and agreed on it.
  bool done() const { return done_; }
  // REQUIRES: done().
  const PsiResult& result() const { return result_; }

 private:
  PsiParty() = default;
  Status OnBlinded(const PsiMessage& m, std::vector<std::string>* out);
  Status OnDoubleBlinded(const PsiMessage& m);
  Status MaybeFinish(std::vector<std::string>* out);
  Status CheckConfirm();

  struct PointHash {
    size_t operator()(const Point& p) const;
  };

  PsiOptions options_;
  SecureBuffer scalar_;
  PsiTag nonce_{};
  std::vector<Point> mine_;           // H(x), then a·H(x), in sent order
  std::vector<uint64_t> sent_order_;  // sent position -> index of the id
  std::vector<Point> my_double_;      // ab·H(x) in sent order, as returned
  bool got_own_reply_ = false;        // at least one returned batch (an empty set's too)
  bool started_ = false;

  std::optional<PsiTag> peer_nonce_;
  uint64_t peer_total_ = 0;
  uint64_t peer_received_ = 0;
  std::unordered_set<Point, PointHash> peer_double_;  // ab·H(y) for the peer's ids

  bool computed_ = false;
  PsiTag my_digest_{};
  std::optional<PsiMessage> peer_confirm_;  // tag and total only (no points)
  bool done_ = false;
  PsiResult result_;
};

}  // namespace fedmesh::psi
