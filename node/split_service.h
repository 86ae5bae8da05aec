// SplitService: fedmesh-node in [train] mode = "split" (docs/vertical.md). Reads this party's
// table ([data] dataset = "csv:..."; the [split] id_column aligns the parties and is never a
// feature; the label party's [data] label_column is the label), its bottom model (and the
// label party's top model), joins the [split] peers over CurveZMQ, runs the job
// (vertical/split_job.h: PSI, alignment, pipelined split training), and keeps the trained
// part(s) in the node store, where fedmesh-model export --db [--part top] finds them. The
// label party writes a metrics line per epoch. Checkpoints go to the same store: a party
// restarted with it resumes the job (docs/vertical.md, "Faults").
// Thread-safety: Run() blocks; `stop` may be set from a signal handler.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "collective/zmq_ring_transport.h"
#include "core/status.h"
#include "crypto/identity.h"
#include "node/node_config.h"
#include "node/split_checkpoint_store.h"
#include "storage/node_store.h"
#include "vertical/split_job.h"

namespace fedmesh {

class SplitService {
 public:
  // InvalidArgument / Corruption / NotFound (exit 2) for keys, peers, the table or the models.
  static Result<std::unique_ptr<SplitService>> Create(const NodeConfig& config, std::function<void(const std::string&)> log);
  ~SplitService();

  Result<vertical::SplitJobReport> Run(const std::atomic<bool>* stop);

 private:
  SplitService() = default;
  Status SaveParts(vertical::SplitPart* bottom, vertical::SplitPart* top);
  // [split] assemble: the whole model from the parts the feature parties sent.
  Status Assemble(vertical::LabelParty& party, const std::vector<std::string>& parts);

  NodeConfig config_;
  std::function<void(const std::string&)> log_;
  std::unique_ptr<Identity> identity_;
  std::vector<PublicIdentity> members_;  // by rank: whose signatures the job checks
  std::unique_ptr<collective::ZmqRingTransport> transport_;
  std::unique_ptr<vertical::LabelJob> label_;
  std::unique_ptr<vertical::FeatureJob> feature_;
  std::unique_ptr<NodeStore> store_;
  std::unique_ptr<NodeCheckpointStore> checkpoints_;
};

}  // namespace fedmesh
