// UpstreamLink: a regional aggregator's seat in its upstream (top) aggregator's federation
// (`[upstream]` in the aggregator's config, docs/hierarchy.md). To the top it is one node:
// it registers under its own site key, takes each FitTask (the top's global model for round
// R), and answers with one signed FitResult whose update is the change its sites made in
// its own round R (regional result - the top's model) and whose num_examples is the sum of
// its sites' examples. FedAvg over regions weighted that way is FedAvg over all sites.
//
// The link does the node side of the wire protocol only: registration (re-sent with
// backoff until acknowledged, and again after a Reject(kNotEnrolled) or a long silence),
// task checks, refusals and the signed answer. Running the regional round is the
// AggregatorService's (RoundEngine::GrantRound). Tasks the region cannot serve are refused
// with Reject(kTaskFailed) and a sentence, so the top's round does not wait for it:
// federated evaluation and statistics (the region holds no data), secure aggregation among
// regions, update prediction, a model with another graph hash or size.
//
// The link registers with 0 examples (its sites come and go), so the top bounds a region's
// claim by [rounds] max_examples_per_node only; set it at the top to the largest region.
// Thread-safety: one thread (the service's event loop) makes every call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aggregator/round_engine.h"
#include "core/env.h"
#include "core/status.h"
#include "core/wire/messages.h"
#include "crypto/identity.h"
#include "transport/zmq/zmq_client.h"

namespace fedmesh {

struct UpstreamLinkOptions {
  // The upstream aggregator's endpoint, e.g. tcp://top.example:5555. Required.
  std::string endpoint;
  // The upstream federation's id (its [federation] id). Required.
  std::string federation_id;
  // Socket settings; federation_id and node_id are filled in. Default: ZmqClientOptions{}.
  ZmqClientOptions transport;
  // Registered but nothing heard from upstream for this long: register again (finds a top
  // aggregator that restarted). Default: 60,000 ms. 0 disables.
  int reregister_after_silence_ms = 60000;
  // The graph hash the region's sites train (RoundEngineOptions::model_sha256; empty for a
  // built-in model) and its parameter count: a task for another model is refused.
  std::string model_sha256;
  size_t num_params = 0;
};

// A FitTask from upstream that the region serves with one regional round.
struct UpstreamTask {
  uint64_t round = 0;          // the upstream round; the regional round has the same number
  uint64_t model_version = 0;  // the upstream model version (Header::model_version)
  std::vector<float> global;   // the upstream model, decoded
  RoundEngine::TrainingSettings settings;  // what the top asks every site to train with
  std::string update_codec;    // FitTask::update_codec: the chain the answer must use ("" = none)
  uint64_t message_id = 0;     // of the FitTask, for a refusal
  // The digest the task's model came with; the answer is signed and sent in the same kind.
  wire::DigestKind digest_kind = wire::DigestKind::kBlake3;
};

// What Poll and Send have done, for logs and tests.
struct UpstreamLinkStats {
  uint64_t registrations = 0;  // RegisterAcks received
  uint64_t tasks = 0;          // FitTasks handed to the service
  uint64_t tasks_refused = 0;  // FitTasks answered with Reject(kTaskFailed)
  uint64_t results_sent = 0;   // FitResults sent
  uint64_t rejects = 0;        // Rejects received from upstream
};

class UpstreamLink {
 public:
  // Connects (in the background) and sends the first Register. `identity` is the region's
  // site key at the top (its name is the region's node id there); `server_key` the top's
  // CurveZMQ public key. InvalidArgument for missing options. REQUIRES: env outlives it.
  static Result<std::unique_ptr<UpstreamLink>> Create(UpstreamLinkOptions options, Identity identity,
                                                      std::array<uint8_t, 32> server_key, Env* env);
  ~UpstreamLink();

  // Handles what upstream sent, waiting up to timeout_ms for the first message: at most one
  // task is returned; acknowledgements, rejects and refused tasks are handled here. Errors
  // only when the transport is broken.
  Result<std::optional<UpstreamTask>> Poll(int timeout_ms);

  // Answers `task`: update = result - task.global in task.update_codec (or exact float32),
  // num_examples, train_loss (NaN is sent as 0), signed with the region's key. A send that
  // fails is logged and returns OK: the top re-sends the task when the region registers
  // again, and the service answers it from the store.
  Status SendResult(const UpstreamTask& task, std::span<const float> result, uint64_t num_examples,
                    double train_loss);

  // Tells upstream the region will not serve `round` (Reject kTaskFailed with `why`).
  Status Refuse(uint64_t round, uint64_t message_id, const std::string& why);

  bool registered() const { return registered_; }
  const std::string& node_id() const { return identity_.name(); }
  const UpstreamLinkStats& stats() const { return stats_; }

 private:
  UpstreamLink(UpstreamLinkOptions options, Identity identity, Env* env);
  wire::Header OutHeader(uint64_t round, uint64_t model_version);
  Status SendRegister();
  // The task as the region serves it, or the sentence it is refused with.
  Result<UpstreamTask> CheckTask(const wire::Message& m, const wire::FitTask& task) const;

  UpstreamLinkOptions options_;
  Identity identity_;
  Env* env_;
  std::unique_ptr<ZmqClient> transport_;
  bool registered_ = false;
  int register_attempt_ = 0;
  std::chrono::steady_clock::time_point next_register_;
  std::chrono::steady_clock::time_point last_heard_;
  uint64_t next_message_id_ = 1;
  UpstreamLinkStats stats_;
};

}  // namespace fedmesh
