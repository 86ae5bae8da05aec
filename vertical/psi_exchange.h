// Runs a PsiParty (crypto/psi/ecdh_psi.h) against one peer over a collective transport (the
// group's CurveZMQ links, or in process in tests): sends its messages as kMessage chunks
// and feeds it the peer's until both agree on the intersection. The same step opens a
// vertical (split) training job and runs alone in fedmesh-psi.
// Thread-safety: one thread; the transport is used by nobody else meanwhile.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "collective/collective_transport.h"
#include "core/status.h"
#include "crypto/psi/ecdh_psi.h"

namespace fedmesh::vertical {

struct PsiExchangeOptions {
  // The peer is given up on after this long without a message. Default: 120,000 ms (a
  // million ids take the peer about a minute of blinding on one core).
  int timeout_ms = 120000;
  // Sees every message sent or received, as it travels (tests check that no id is in one).
  std::function<void(bool sent, std::string_view bytes)> observe;
};

struct PsiExchangeStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
};

// DeadlineExceeded when the peer is silent for options.timeout_ms; the party's errors
// (Corruption, InvalidArgument) for a bad message, prefixed with the peer's rank;
// InvalidArgument for a chunk from another rank or of another kind.
Result<psi::PsiResult> RunPsi(collective::CollectiveTransport& transport, int peer, psi::PsiParty& party,
                              const PsiExchangeOptions& options = {}, PsiExchangeStats* stats = nullptr);
// One intersection with each of `peers` at once (parties[i] against peers[i]): the label
// party of a split job with every feature party. Results in the order of `peers`.
Result<std::vector<psi::PsiResult>> RunPsiWithEach(collective::CollectiveTransport& transport,
                                                   const std::vector<int>& peers,
                                                   const std::vector<psi::PsiParty*>& parties,
                                                   const PsiExchangeOptions& options = {},
                                                   PsiExchangeStats* stats = nullptr);

}  // namespace fedmesh::vertical
