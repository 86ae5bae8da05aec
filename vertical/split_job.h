// A split-training job end to end over the group's links (a CollectiveTransport): private
// set intersection of every feature party's ids with the label party's, the label party's
// align message fixing one row order for all (the rows every party shares, in the order of
// its intersection with the first feature party), a held-out test split of those rows
// (stratified, on the label party's side; the feature parties never learn which rows are
// test), then epochs of pipelined micro-batch steps and an evaluation after each epoch.
// Each party runs its side in its own process (fedmesh-node [train] mode = "split") or
// thread (tests). Thread-safety: one thread per side; the transport is the job's alone.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collective/collective_transport.h"
#include "core/data/dataset.h"
#include "crypto/identity.h"
#include "crypto/psi/ecdh_psi.h"
#include "vertical/split_checkpoint.h"
#include "vertical/split_feature_party.h"
#include "vertical/split_label_party.h"

namespace fedmesh::vertical {

struct SplitJobOptions {
  int epochs = 1;             // passes over the training rows. Default 1.
  int batch = 64;             // rows per step. Default 64.
  uint32_t microbatches = 1;  // per step, pipelined. Default 1 (none).
  double test_fraction = 0.2; // of the aligned rows, held out per class by the label party. Default 0.2.
  // The order of the aligned rows (by a hash of seed and id, not the PSI's random order),
  // so the test split and the shuffles: one seed, one held-out set in every run. Default 0.
  uint64_t seed = 0;
  int timeout_ms = 60000;     // a party silent this long fails the job. Default 60,000 ms.
  uint64_t max_steps = 0;     // stop training after this many steps (benchmarks). Default 0: no limit.
  // The label party does its own bottom model's work while the feature parties compute
  // (LabelParty::DoIdleWork). false: in line, the sequential schedule of split learning
  // without pipelining, for benchmarks. Default true.
  bool overlap = true;
  // Training steps begun before the one in flight is done: 0 (exact synchronous SGD, the
  // default) or 1 (the next step's forwards run while this step's gradients travel; the
  // feature parties' bottoms then learn from weights one step old, docs/vertical.md). The
  // parties drain at every epoch's end, checkpoint and max_steps.
  uint32_t staleness = 0;
  // Where this party keeps its checkpoints. null: none, and a party lost fails the job.
  // Set: the parties checkpoint (two-phase, docs/vertical.md) every `checkpoint_every`
  // steps and at every epoch's end; a lost feature party stalls the job until it comes
  // back (within rejoin_timeout_ms), then every party goes back to the last committed
  // step; a party that restarts resumes from its store instead of running PSI again.
  CheckpointStore* checkpoints = nullptr;
  uint64_t checkpoint_every = 0;     // 0: at epochs' ends only
  int rejoin_timeout_ms = 300000;    // 5 minutes
  psi::PsiOptions psi;
  // Per-message signatures (vertical/split_signature.h): this party's identity and every
  // party's public identity by rank. Set: every split message sent is signed, and one
  // received counts only with its sender's valid signature for this party in `federation`
  // (PermissionDenied otherwise). null and empty (the default): nothing is signed, and
  // signatures that come are not checked (in-process tests only; fedmesh-node always signs
  // and checks). Not owned; outlives the job.
  const Identity* signer = nullptr;
  std::vector<PublicIdentity> members;
  std::string federation;  // what the signatures bind besides the parties ([federation] id)
  std::function<void(const std::string&)> log;      // progress lines; may be empty
  std::function<void(const std::string&)> metrics;  // label party: a JSON line per epoch; may be empty
  const std::atomic<bool>* stop = nullptr;           // set: stop between steps (Unavailable)
};

struct SplitJobReport {
  uint64_t my_ids = 0, aligned_rows = 0, train_rows = 0, test_rows = 0;
  uint64_t steps = 0;
  // Label party: the share of training time spent waiting for activations, and the mean
  // wall time of a step.
  double idle_fraction = 0.0;
  double step_ms = 0.0;
  std::map<std::string, double> test_metrics;  // label party, after the last epoch
  double test_loss = 0.0;
  uint64_t bytes_sent = 0, bytes_received = 0;  // split messages and PSI, this side
  // Label party: its own row (index into the job's data) of each aligned row, and which
  // aligned rows were held out for testing.
  std::vector<uint32_t> aligned;
  std::vector<uint64_t> test;
  double seconds = 0.0;
  uint64_t resumes = 0;  // times the job went back to a checkpoint
  // Label party with collect_parts: each feature party's trained part as ONNX, in
  // feature_ranks order; empty where that party did not consent.
  std::vector<std::string> parts;
};

struct LabelJob {
  std::vector<std::string> ids;  // one per row of `data`, unique
  Dataset data;                  // this party's columns and the label
  std::unique_ptr<SplitPart> bottom, top;
  LabelPartyOptions party;
  std::vector<int> feature_ranks;  // in column order of the top's input (after the own bottom's)
  // At the end, ask every feature party for its trained part (SplitJobReport::parts), to
  // assemble the whole model. Default false.
  bool collect_parts = false;
};

struct FeatureJob {
  std::vector<std::string> ids;
  Dataset data;  // this party's columns (labels unused)
  std::unique_ptr<SplitPart> bottom;
  FeaturePartyOptions party;
  int label_rank = 0;
  // Consent to send this party's trained part to the label party when it asks at the end
  // ([split] share_part). Default false: it answers with nothing.
  bool share_part = false;
};

// The label party's side. Its trained parts stay in *party_out (for export) when not null.
// Errors: the PSI's, Corruption for a feature party's message out of protocol, Unavailable
// when a feature party reports that it stopped, DeadlineExceeded when one is silent. Every
// feature party is told (an error message) when the job fails here.
Result<SplitJobReport> RunLabelJob(collective::CollectiveTransport& transport, LabelJob job,
                                   const SplitJobOptions& options, std::unique_ptr<LabelParty>* party_out = nullptr);
// A feature party's side, until the label party says done.
Result<SplitJobReport> RunFeatureJob(collective::CollectiveTransport& transport, FeatureJob job,
                                     const SplitJobOptions& options,
                                     std::unique_ptr<FeatureParty>* party_out = nullptr);

}  // namespace fedmesh::vertical
