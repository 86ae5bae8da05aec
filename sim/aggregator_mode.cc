// Aggregator mode: fedmesh-aggregator's RoundEngine and Strategy, fedmesh-node's RunFitTask,
// the real wire codec, in virtual time over the InProcessNetwork.
//
// Clients register at t = 0 (the engine opens round 1 when all have). A FitTask reaching a
// client starts its training job; the job's result is sent at arrival + compute time
// (local_epochs * samples / the client's speed). Jobs go to the workers in the background
// as their tasks arrive (Workspaces::Serve), and the event loop waits for a job only when
// its result is due, so the aggregator's handling of one result overlaps the training of
// the next. Since a job depends only on its task and the client's own state, the run is
// the same whatever the thread count or timing. With [sim] batched_clients jobs are run
// lazily instead, all pending ones at once when the first is due, in groups through the
// BatchedTrainer (RunPendingBatched), with the same results on the CPU.
//
// Federated evaluation ([eval] federated): the engine's evaluate_only tasks reach every
// connected client like FitTasks; a client that is online evaluates the global model with
// fedmesh-node's RunEvalTask on its held-out rows (SimData::TestOf) on a worker, and its
// answer is sent at arrival + (held-out rows / its speed), in parallel with any training it
// is doing. Evaluation tasks and answers are counted in the evaluation's line, not in the
// rounds' bytes.
//
// Sharded over R ranks (sim/rank_group.h): every rank runs this whole loop (engine,
// network, virtual time, registrations, crashes, dropout coins) from the same seed, so they
// all see the same events; only a client's owner (sim/client_shards.h) trains or evaluates
// for it and keeps its carry and ledger. When a client's answer is due, its owner
// broadcasts it (ClientAnswer: the encoded frames it sends) and every rank delivers the
// same message to its engine, which aggregates the same updates in the same order: rank 0
// writes the one-process metrics file byte for byte. A rank waiting for an answer trains
// its own queued clients meanwhile.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <variant>

#include "aggregator/round_engine.h"
#include "aggregator/strategy.h"
#include "core/codec/codec.h"
#include "core/rng.h"
#include "node/fit_task_runner.h"
#include "node/record_privacy.h"
#include "sim/client_answer.h"
#include "sim/client_state_store.h"
#include "sim/client_traits.h"
#include "sim/in_process_network.h"
#include "sim/sim_modes.h"
#include "sim/virtual_clock_env.h"

namespace fedmesh::sim_internal {
namespace {

constexpr char kAggregator[] = "aggregator";

uint64_t ClientIndex(const std::string& id) { return std::stoull(id.substr(1)); }

// Replaces `delta` by what a Byzantine client sends instead.
void ApplyAttack(const SimOptions& o, uint64_t seed, std::vector<float>& delta) {
  switch (o.attack) {
    case Attack::kSignFlip:
      for (float& v : delta) v = static_cast<float>(-o.attack_scale * v);
      break;
    case Attack::kScaled:
      for (float& v : delta) v = static_cast<float>(o.attack_scale * v);
      break;
    case Attack::kNoise: {
      double sq = 0;
      for (float v : delta) sq += static_cast<double>(v) * v;
      const double sd = o.attack_scale * std::sqrt(sq / static_cast<double>(std::max<size_t>(1, delta.size())));
      Rng rng(seed);
      for (float& v : delta) v = static_cast<float>(rng.Normal(0.0, sd));
      break;
    }
  }
}

class AggregatorSim {
 public:
  explicit AggregatorSim(SimContext& ctx)
      : ctx_(ctx),
        o_(ctx.options),
        env_(o_.seed),
        net_(env_, SimLinkModel(o_), SimNetworkSeed(o_)) {}

  Result<std::vector<float>> Run();

 private:
  struct Job {
    uint64_t client = 0;
    wire::FitTask task;
    uint64_t model_version = 0;
    uint64_t message_id = 0;  // of its FitResult, taken when the task arrived
    bool attack = false;
    bool owned = true;  // this rank trains it; else its answer comes from its owner
    bool done = false;  // batched path: set by RunPending
    // Per-client path: the background job, the carry it trains with (taken when the task
    // arrived) and whether Collect has put the carry back.
    Workspaces::Ticket ticket;
    FitCarry carry;
    bool collected = false;
    Result<FitOutcome> outcome = Status::Internal("not run");
    // The FitResult through the wire codec, made on the worker that trained it (when the
    // outcome is a result): the client's encoding and the aggregator's decoding.
    Result<WireTrip> trip = Status::Internal("not sent");
    std::vector<wire::Frame> frames;  // sharded, owned: the encoding, for the other ranks
  };
  // One client's answer to an evaluate_only task, computed on a worker as the task arrives.
  struct EvalJob {
    uint64_t client = 0;
    wire::FitTask task;  // emptied once evaluated: it holds a copy of the model
    uint64_t model_version = 0;
    uint64_t message_id = 0;  // of its answer, taken when the task arrived
    Workspaces::Ticket ticket;
    Result<FitOutcome> outcome = Status::Internal("not run");
    Result<WireTrip> trip = Status::Internal("not sent");  // set when there is an answer
    std::vector<wire::Frame> frames;  // sharded, owned: the encoding, for the other ranks
  };
  using Outputs = std::vector<RoundEngine::Output>;

  Status Init();
  void Handle(Outputs outputs);
  void OnClientMessage(const std::string& id, wire::Message message);
  void OnJobDue(const std::shared_ptr<Job>& job);
  // Federated evaluation: starts the client's evaluation of `task` on the workers and
  // schedules its answer.
  void StartEval(uint64_t client, const ClientTraits& traits, wire::FitTask task,
                 uint64_t model_version);
  void OnEvalDue(const std::shared_ptr<EvalJob>& job);
  void RecordEval(const FederatedEvalReport& report);
  // Per-client path: takes the client's carry and submits the job to the workers.
  void Submit(const std::shared_ptr<Job>& job);
  // Per-client path: waits for the job and puts its carry back (once).
  void Collect(Job& job);
  void RunPending();  // batched path: every job not yet run
  void PutCarry(uint64_t client, FitCarry carry);
  // On a worker, after the job's outcome is set: its FitResult through the wire codec.
  void TransmitResult(Job& job, const Model& worker);
  // The digest memo of the worker that holds `worker` (one per worker: Transmit's memo).
  wire::DigestMemo* MemoOf(const Model& worker) { return &memos_.at(&worker); }
  // RunPending with ctx_.batched: prepares every job, trains them in groups of up to
  // batched_clients with the BatchedTrainer, and finishes each group on the workers.
  void RunPendingBatched(const std::vector<std::shared_ptr<Job>>& jobs,
                         std::vector<FitCarry>& carries);
  // The FitContext of a job: the client's node-side settings.
  FitContext ContextOf(const Job& job, Model* model, const Dataset* data) const;
  // The client's carried state from the store (empty when it has none).
  Result<FitCarry> TakeCarry(uint64_t client);
  // Applies the crash schedule's events of every round up to `round`: crashes go down
  // (before that round's FitTasks go out), rejoins register again.
  void ApplySchedule(uint64_t round);
  void Rejoin(uint64_t client);
  // Applies the schedule up to the next round with a rejoin; false when none is left.
  bool ApplyNextRejoin();
  void CloseRoundMetrics(const RoundEngine::RoundClosed& closed);
  // Sharded runs: every rank gets the answer of `client` from its owner (a collective:
  // every rank calls it at the same event). Non-owners' outcome and trip become the
  // owner's; the owner's frames are released.
  Status ShareAnswer(uint64_t client, Result<FitOutcome>& outcome, Result<WireTrip>& trip,
                     std::vector<wire::Frame>& frames);
  // The [privacy] dp-sgd epsilon_max of the metrics: the largest any client spent, over
  // every rank's ledgers (a collective when sharded).
  Result<double> MaxClientEpsilon();
  Status SendFromClient(uint64_t client, wire::Body body, uint64_t round, uint64_t version);
  void Fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
  }

  SimContext& ctx_;
  const SimOptions& o_;
  VirtualClockEnv env_;
  InProcessNetwork net_;
  std::optional<RoundEngine> engine_;
  codec::Chain chain_;
  std::vector<std::shared_ptr<Job>> pending_;
  std::map<uint64_t, std::shared_ptr<Job>> busy_;  // client -> its unfinished job
  std::unique_ptr<ClientStateStore> states_;       // only clients with state to carry
  // [privacy] dp-sgd: each client's ledger, made when it first trains. Jobs of different
  // clients use theirs from worker threads at once (a client has one job at a time).
  mutable std::mutex ledgers_mu_;
  mutable std::map<uint64_t, std::unique_ptr<RecordPrivacyLedger>> ledgers_;
  std::map<const Model*, wire::DigestMemo> memos_;  // one per worker, by its model
  uint64_t next_message_id_ = 1;
  uint64_t scheduled_round_ = 0;  // the crash schedule is applied up to this round
  bool finished_ = false;
  Status status_;
  // This round's accounting, since the last RoundClosed.
  uint64_t mark_total_ = 0, mark_down_ = 0;
  // Bytes of evaluation tasks and answers: in all, at the last RoundClosed (taken out of
  // the round's bytes) and at the last EvalClosed (the evaluation's own).
  uint64_t eval_down_ = 0, eval_up_ = 0;
  uint64_t round_mark_eval_down_ = 0, round_mark_eval_up_ = 0;
  uint64_t eval_mark_down_ = 0, eval_mark_up_ = 0;
};

Status AggregatorSim::Init() {
  RoundEngineOptions eo;
  eo.federation_id = kSimFederation;
  eo.aggregator_id = kAggregator;
  eo.total_rounds = o_.rounds;
  eo.clients_per_round = static_cast<int>(o_.clients_per_round);
  eo.min_clients =
      static_cast<int>(o_.min_clients > 0 ? o_.min_clients : (o_.clients_per_round + 1) / 2);
  // Clients register in a seeded random order and round 1 opens as soon as
  // clients_per_round have: its selection is a uniform sample, like every later round's.
  // Later rounds, as on a real aggregator, wait until that many are connected.
  eo.min_available_clients = static_cast<int>(o_.clients_per_round);
  eo.timeout_s = o_.round_timeout_s;
  eo.mode = o_.round_mode;
  eo.buffer_size =
      static_cast<int>(o_.buffer_size > 0 ? o_.buffer_size : (o_.clients_per_round + 1) / 2);
  eo.max_staleness = static_cast<int>(o_.max_staleness);
  eo.max_retries = 3;
  eo.local_epochs = o_.local_epochs;
  eo.batch_size = o_.trainer.batch_size;
  eo.learning_rate = o_.trainer.sgd.lr;
  eo.momentum = o_.trainer.sgd.momentum;
  eo.update_codec = o_.codec;
  eo.downlink_codec = o_.downlink;
  eo.update_prediction = o_.update_prediction;
  eo.report_update_params = false;  // no store to persist them in
  eo.federated_eval.enabled = o_.federated_eval;
  eo.federated_eval.every = o_.eval_every;
  eo.federated_eval.min_sites = o_.eval_min_sites;
  eo.federated_eval.timeout_s = o_.eval_timeout_s;
  FM_ASSIGN_OR_RETURN(auto strategy, MakeStrategy(o_.strategy, StrategyOptionsFor(o_)));
  FM_ASSIGN_OR_RETURN(chain_, codec::Chain::Parse(o_.codec));
  ClientStateStoreOptions so_state;
  so_state.memory_budget_bytes = static_cast<size_t>(o_.state_memory_mb) << 20;
  so_state.spill_path = o_.state_spill_path;
  FM_ASSIGN_OR_RETURN(states_, ClientStateStore::Create(so_state));
  for (size_t w = 0; w < ctx_.workers.size(); ++w) memos_.try_emplace(&ctx_.workers.model(w));
  Evaluator evaluator = [this](std::span<const float> global) {
    // The round being closed is the engine's current one.
    EvalResult r{std::nan(""), std::nan(""), {}};
    // A privacy budget that ends the run here makes this the last round: evaluate it.
    if (ctx_.data.test.size() == 0 ||
        (!IsEvalRound(ctx_, engine_->round()) && engine_->strategy().CanRunAnotherRound().ok())) {
      return r;
    }
    auto e = Evaluate(ctx_, global);
    if (!e.ok()) {
      Fail(e.status());
      return r;
    }
    return EvalResult{e->accuracy, e->loss, e->metrics};
  };
  FM_ASSIGN_OR_RETURN(auto engine, RoundEngine::Create(eo, &env_, std::move(strategy),
                                                       ctx_.initial, std::move(evaluator)));
  engine_.emplace(std::move(engine));
  net_.SetNodeLinks([this](const std::string& node) {
    return node == kAggregator ? NodeLink{} : TraitsOf(o_, ClientIndex(node)).link;
  });
  net_.SetHandler([this](const std::string& from, const std::string& to, wire::Message m) {
    if (finished_ || !status_.ok()) return;
    if (to == kAggregator) {
      Handle(engine_->OnMessage(from, m));
    } else {
      OnClientMessage(to, std::move(m));
    }
  });
  return Status::OK();
}

Result<std::vector<float>> AggregatorSim::Run() {
  FM_RETURN_IF_ERROR(Init());
  Handle(engine_->Start());
  // Registration: instantaneous at t = 0, straight into the engine (a million RegisterAcks
  // through the network would only cost time; they carry nothing the clients use).
  ApplySchedule(1);  // clients scheduled to be down from round 1 do not register
  std::vector<uint32_t> order(o_.clients);
  for (uint32_t c = 0; c < order.size(); ++c) order[c] = c;
  Rng(SplitMix64(o_.seed ^ 0x7265676973746572ull)).Shuffle(order);
  for (uint32_t c : order) {
    if (!status_.ok()) break;
    const std::string id = SimClientId(c);
    if (net_.IsDown(id)) continue;
    wire::Register r;
    r.node_id = id;
    r.num_examples = ctx_.data.SizeOf(c);
    wire::Message m{wire::Header{kSimFederation, id, 0, 0, next_message_id_++}, std::move(r)};
    Handle(engine_->OnMessage(id, m));
  }
  while (!finished_ && status_.ok()) {
    if (net_.RunAll(1) > 0) continue;
    // Nothing left to happen: the engine waits for clients (too few connected). The
    // schedule's next rejoin, if any, happens now rather than never.
    if (!ApplyNextRejoin()) break;
  }
  FM_RETURN_IF_ERROR(status_);
  if (!finished_) return Status::Internal("the simulation ran out of events before the last round");
  return engine_->global();
}

void AggregatorSim::Handle(Outputs outputs) {
  // The messages of one step (a round's FitTasks) go through the wire codec on the workers
  // at once; they are then sent in the engine's order.
  std::vector<size_t> sends;
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto* send = std::get_if<RoundEngine::Send>(&outputs[i]);
    if (send != nullptr && !std::holds_alternative<wire::RegisterAck>(send->message.body)) {
      sends.push_back(i);
    }
  }
  std::vector<Result<WireTrip>> trips(outputs.size(), Status::Internal("not sent"));
  Status s = ctx_.workers.Run(sends.size(), [&](size_t k, Model& worker) {
    const size_t i = sends[k];
    trips[i] = InProcessNetwork::Transmit(std::get<RoundEngine::Send>(outputs[i]).message,
                                          net_.limits(), MemoOf(worker));
    return Status::OK();
  });
  if (!s.ok()) return Fail(s);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!status_.ok()) return;
    auto& out = outputs[i];
    if (auto* send = std::get_if<RoundEngine::Send>(&out)) {
      if (std::holds_alternative<wire::RegisterAck>(send->message.body)) continue;
      if (!trips[i].ok()) {
        Fail(trips[i].status());
        continue;
      }
      const uint64_t bytes = trips[i]->bytes;
      if (Status sent = net_.Send(kAggregator, send->to, std::move(*trips[i])); !sent.ok()) {
        Fail(sent);
      } else if (auto* task = std::get_if<wire::FitTask>(&send->message.body);
                 task != nullptr && task->evaluate_only) {
        eval_down_ += bytes;
      }
    } else if (auto* timer = std::get_if<RoundEngine::SetTimer>(&out)) {
      net_.ScheduleAt(timer->at_seconds, [this] {
        if (!finished_ && status_.ok()) Handle(engine_->OnTimer(env_.NowSeconds()));
      });
    } else if (auto* closed = std::get_if<RoundEngine::RoundClosed>(&out)) {
      CloseRoundMetrics(*closed);
      ApplySchedule(closed->round + 1);
    } else if (auto* eval = std::get_if<RoundEngine::EvalClosed>(&out)) {
      RecordEval(eval->report);
    } else if (auto* fin = std::get_if<RoundEngine::Finished>(&out)) {
      finished_ = true;
      if (!fin->status.ok()) Fail(fin->status.WithContext("the federation failed"));
      ctx_.stopped_early = fin->stopped_early;
    }
  }
}

void AggregatorSim::ApplySchedule(uint64_t round) {
  for (; scheduled_round_ < round;) {
    const uint64_t r = ++scheduled_round_;
    for (const CrashEvent& c : o_.crashes) {
      if (c.round == r) {
        const std::string id = SimClientId(c.client);
        net_.SetDown(id, true);
        // The aggregator's transport notices the lost connection (heartbeats).
        Handle(engine_->OnDisconnect(id));
      } else if (c.rounds_down > 0 && c.round + c.rounds_down == r) {
        Rejoin(c.client);
      }
    }
  }
}

void AggregatorSim::Rejoin(uint64_t client) {
  net_.SetDown(SimClientId(client), false);
  wire::Register reg;
  reg.node_id = SimClientId(client);
  reg.num_examples = ctx_.data.SizeOf(client);
  if (Status s = SendFromClient(client, std::move(reg), 0, 0); !s.ok()) Fail(s);
}

bool AggregatorSim::ApplyNextRejoin() {
  uint64_t next = UINT64_MAX;
  for (const CrashEvent& c : o_.crashes) {
    if (c.rounds_down > 0 && c.round + c.rounds_down > scheduled_round_) {
      next = std::min(next, c.round + c.rounds_down);
    }
  }
  if (next == UINT64_MAX) return false;
  ApplySchedule(next);
  return true;
}

Status AggregatorSim::SendFromClient(uint64_t client, wire::Body body, uint64_t round,
                                     uint64_t version) {
  const std::string id = SimClientId(client);
  wire::Message m{wire::Header{kSimFederation, id, round, version, next_message_id_++},
                  std::move(body)};
  return net_.Send(id, kAggregator, m);
}

void AggregatorSim::OnClientMessage(const std::string& id, wire::Message message) {
  auto* task = std::get_if<wire::FitTask>(&message.body);
  if (task == nullptr) return;  // Rejects and acks change nothing on a simulated client
  const uint64_t c = ClientIndex(id);
  const ClientTraits traits = TraitsOf(o_, c);
  if (task->evaluate_only) {
    // An offline client does not answer; [sim] dropout is about training and does not apply.
    if (IsAvailable(o_, traits, task->round)) {
      StartEval(c, traits, std::move(*task), message.header.model_version);
    }
    return;
  }
  if (DropsOut(o_, c, task->round) ||
      !IsAvailable(o_, traits, task->round)) {
    return;  // drops out: never answers this task (counted as dropped at the close)
  }
  // Its carry must not be used twice at once.
  if (auto it = busy_.find(c); it != busy_.end()) {
    if (ctx_.batched != nullptr) {
      RunPending();
    } else {
      Collect(*it->second);
    }
  }
  auto job = std::make_shared<Job>();
  job->client = c;
  job->owned = ctx_.shards.Owns(c);
  if (job->owned) {
    job->task = std::move(*task);
  } else {
    job->task.round = task->round;  // the model it carries is trained by the owner
  }
  job->model_version = message.header.model_version;
  job->message_id = next_message_id_++;
  job->attack = traits.byzantine;
  busy_[c] = job;
  if (ctx_.batched != nullptr) {
    pending_.push_back(job);  // every rank's, so all run RunPending at the same events
  } else if (job->owned) {
    Submit(job);
  }
  const double compute_s = static_cast<double>(o_.local_epochs) *
                           static_cast<double>(ctx_.data.SizeOf(c)) / traits.samples_per_s;
  net_.ScheduleAt(env_.NowSeconds() + compute_s, [this, job] { OnJobDue(job); });
}

FitContext AggregatorSim::ContextOf(const Job& job, Model* model, const Dataset* data) const {
  FitContext fc;
  fc.model = model;
  fc.train = data;
  fc.trainer = o_.trainer;
  fc.default_chain = &chain_;
  fc.feedback = o_.error_feedback;
  fc.node_id = SimClientId(job.client);
  fc.seed = o_.seed;
  if (o_.privacy.enabled()) {
    std::lock_guard<std::mutex> lock(ledgers_mu_);
    auto& ledger = ledgers_[job.client];
    // Validated with the options, so Create cannot fail here.
    if (!ledger) ledger = std::make_unique<RecordPrivacyLedger>(RecordPrivacyLedger::Create(o_.privacy).value());
    fc.privacy = ledger.get();
    fc.seeded_privacy_noise = true;
  }
  if (job.attack) {
    const uint64_t seed = FitSeed(o_.seed ^ 0x617474ull, fc.node_id, job.task.round);
    fc.corrupt = [this, seed](std::vector<float>& delta) { ApplyAttack(o_, seed, delta); };
  }
  return fc;
}

void AggregatorSim::Submit(const std::shared_ptr<Job>& job) {
  auto carry = TakeCarry(job->client);
  if (!carry.ok()) return Fail(carry.status());
  job->carry = std::move(*carry);
  job->ticket = ctx_.workers.Submit([this, job](Model& model) {
    const Dataset& data = ctx_.data.DataOf(job->client);
    job->outcome = RunFitTask(ContextOf(*job, &model, &data), job->task, job->carry);
    TransmitResult(*job, model);
  });
}

void AggregatorSim::Collect(Job& job) {
  if (job.collected || job.ticket == nullptr) return;
  ctx_.workers.Wait(job.ticket);
  job.collected = true;
  ++ctx_.client_updates;
  PutCarry(job.client, std::move(job.carry));
}

void AggregatorSim::PutCarry(uint64_t client, FitCarry carry) {
  ClientState state;
  state.velocity = std::move(carry.velocity);
  if (carry.feedback) {
    state.residual = carry.feedback->residual();
    state.dgc_velocity = carry.feedback->velocity();
  }
  if (Status put = states_->Put(client, std::move(state)); !put.ok()) Fail(put);
}

void AggregatorSim::RunPending() {
  if (pending_.empty()) return;
  std::vector<std::shared_ptr<Job>> all, jobs;
  all.swap(pending_);
  for (auto& job : all) {
    if (job->owned) {
      jobs.push_back(job);
    } else {
      job->done = true;  // its owner runs it at this same event
    }
  }
  if (jobs.empty()) return;
  std::vector<FitCarry> carries(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    auto carry = TakeCarry(jobs[j]->client);
    if (!carry.ok()) {
      Fail(carry.status());
      return;
    }
    carries[j] = std::move(*carry);
  }
  RunPendingBatched(jobs, carries);
  ctx_.client_updates += jobs.size();
  for (size_t j = 0; j < jobs.size(); ++j) PutCarry(jobs[j]->client, std::move(carries[j]));
}

void AggregatorSim::RunPendingBatched(const std::vector<std::shared_ptr<Job>>& jobs,
                                      std::vector<FitCarry>& carries) {
  BatchedTrainer& trainer = *ctx_.batched;
  // Preparation reads only the model's size: any worker's model serves.
  Model* sizing = &ctx_.workers.model(0);
  std::vector<PreparedFitTask> prepared(jobs.size());
  // Jobs that train together share their settings (a round's tasks all do; buffered rounds
  // may mix rounds); groups keep the pending order, so the run is deterministic.
  struct Group {
    TrainerOptions options;
    uint32_t epochs;
    std::vector<size_t> jobs;
  };
  std::vector<Group> groups;
  for (size_t j = 0; j < jobs.size(); ++j) {
    Job& job = *jobs[j];
    prepared[j] = PrepareFitTask(ContextOf(job, sizing, nullptr), job.task);
    if (!prepared[j].refused.empty()) {
      FitOutcome refused;
      refused.refused = std::move(prepared[j].refused);
      job.outcome = std::move(refused);
      job.done = true;
      continue;
    }
    const PreparedFitTask& p = prepared[j];
    auto same = [&](const Group& g) {
      const SgdOptions &a = g.options.sgd, &b = p.trainer.sgd;
      return g.epochs == p.epochs && g.options.batch_size == p.trainer.batch_size &&
             a.lr == b.lr && a.momentum == b.momentum && a.weight_decay == b.weight_decay &&
             a.prox_mu == b.prox_mu && g.jobs.size() < static_cast<size_t>(trainer.capacity());
    };
    auto g = std::find_if(groups.begin(), groups.end(), same);
    if (g == groups.end()) {
      groups.push_back(Group{p.trainer, p.epochs, {}});
      g = groups.end() - 1;
    }
    g->jobs.push_back(j);
  }

  for (const Group& group : groups) {
    const size_t n = group.jobs.size();
    std::vector<const Dataset*> data(n);
    for (size_t i = 0; i < n; ++i) data[i] = &ctx_.data.DataOf(jobs[group.jobs[i]]->client);
    std::vector<BatchedClient> clients(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t j = group.jobs[i];
      PreparedFitTask& p = prepared[j];
      clients[i].params = p.global;
      clients[i].velocity = StartVelocity(p, carries[j]);
      if (p.trainer.sgd.prox_mu > 0) clients[i].prox_anchor = p.global;
      clients[i].data = data[i];
      clients[i].data_id = ctx_.data.DataIdOf(jobs[j]->client);
      clients[i].rng = &p.env.rng();
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto trained = trainer.Train(clients, group.options, static_cast<int>(group.epochs));
    const auto t1 = std::chrono::steady_clock::now();
    ctx_.batched_train_seconds += std::chrono::duration<double>(t1 - t0).count();
    if (!trained.ok()) {
      for (size_t j : group.jobs) {
        jobs[j]->outcome = trained.status();
        jobs[j]->done = true;
      }
      continue;
    }
    // Finishing (delta, codecs, error feedback) is per client: on the workers.
    Status s = ctx_.workers.Run(n, [&](size_t i, Model& worker) {
      const size_t j = group.jobs[i];
      Job& job = *jobs[j];
      BatchedClientResult& r = (*trained)[i];
      TrainedFit fit;
      fit.params = std::move(r.params);
      fit.velocity = std::move(r.velocity);
      fit.last_epoch = r.epochs.back();
      job.outcome = FinishFitTask(ContextOf(job, sizing, data[i]), prepared[j], std::move(fit),
                                  carries[j]);
      TransmitResult(job, worker);
      job.done = true;
      return Status::OK();
    });
    ctx_.batched_finish_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    if (!s.ok()) Fail(s);
  }
}

void AggregatorSim::TransmitResult(Job& job, const Model& worker) {
  if (!job.outcome.ok() || !job.outcome->refused.empty()) return;
  const std::string id = SimClientId(job.client);
  wire::Message m{wire::Header{kSimFederation, id, job.task.round, job.model_version, job.message_id},
                  std::move(job.outcome->result)};
  job.trip = InProcessNetwork::Transmit(m, net_.limits(), MemoOf(worker),
                                       ctx_.sharded() ? &job.frames : nullptr);
}

Result<FitCarry> AggregatorSim::TakeCarry(uint64_t client) {
  FM_ASSIGN_OR_RETURN(ClientState state, states_->Take(client));
  FitCarry carry;
  carry.velocity = std::move(state.velocity);
  if (!state.residual.empty() || !state.dgc_velocity.empty()) {
    FM_ASSIGN_OR_RETURN(auto feedback, codec::ErrorFeedback::Create(chain_, o_.error_feedback));
    FM_RETURN_IF_ERROR(feedback.Restore(std::move(state.residual), std::move(state.dgc_velocity)));
    carry.feedback.emplace(std::move(feedback));
  }
  return carry;
}

void AggregatorSim::OnJobDue(const std::shared_ptr<Job>& job) {
  if (ctx_.batched != nullptr) {
    if (!job->done) RunPending();
  } else {
    Collect(*job);
  }
  if (auto it = busy_.find(job->client); it != busy_.end() && it->second == job) busy_.erase(it);
  if (finished_ || !status_.ok()) return;
  if (Status s = ShareAnswer(job->client, job->outcome, job->trip, job->frames); !s.ok()) {
    return Fail(s);
  }
  if (!job->outcome.ok()) {
    Fail(job->outcome.status().WithContext("training " + SimClientId(job->client)));
    return;
  }
  FitOutcome& out = *job->outcome;
  if (!out.refused.empty()) return;  // logged by a real node; the round goes on without it
  const std::string id = SimClientId(job->client);
  if (!job->trip.ok()) return Fail(job->trip.status().WithContext("sending from " + id));
  if (Status s = net_.Send(id, kAggregator, std::move(*job->trip)); !s.ok() && !net_.IsDown(id)) {
    Fail(s);
  }
}

void AggregatorSim::StartEval(uint64_t client, const ClientTraits& traits, wire::FitTask task,
                              uint64_t model_version) {
  auto job = std::make_shared<EvalJob>();
  job->client = client;
  job->task = std::move(task);
  job->model_version = model_version;
  job->message_id = next_message_id_++;
  // Like training: the client's held-out rows at its speed.
  const double compute_s =
      static_cast<double>(ctx_.data.TestSizeOf(client)) / traits.samples_per_s;
  net_.ScheduleAt(env_.NowSeconds() + compute_s, [this, job] { OnEvalDue(job); });
  if (!ctx_.shards.Owns(client)) {
    job->task = wire::FitTask{};  // its owner evaluates
    return;
  }
  job->ticket = ctx_.workers.Submit([this, job](Model& model) {
    const std::string id = SimClientId(job->client);
    FitContext fc;
    fc.model = &model;
    fc.train = &ctx_.data.DataOf(job->client);  // what the client trains on, as a node's
    fc.trainer = o_.trainer;
    fc.default_chain = &chain_;
    fc.feedback = o_.error_feedback;
    fc.node_id = id;
    fc.seed = o_.seed;
    // The simulator's clients have no local tensors: nothing to carry.
    job->outcome = RunEvalTask(fc, job->task, FitCarry{}, ctx_.data.TestOf(job->client));
    const uint64_t round = job->task.round;
    job->task = wire::FitTask{};
    if (!job->outcome.ok() || !job->outcome->refused.empty()) return;
    wire::Message m{wire::Header{kSimFederation, id, round, job->model_version, job->message_id},
                    std::move(job->outcome->result)};
    job->trip = InProcessNetwork::Transmit(m, net_.limits(), MemoOf(model),
                                           ctx_.sharded() ? &job->frames : nullptr);
    job->outcome->global = std::vector<float>();  // the decoded model: not needed any more
  });
}

void AggregatorSim::OnEvalDue(const std::shared_ptr<EvalJob>& job) {
  if (job->ticket != nullptr) ctx_.workers.Wait(job->ticket);
  if (finished_ || !status_.ok()) return;
  if (Status s = ShareAnswer(job->client, job->outcome, job->trip, job->frames); !s.ok()) {
    return Fail(s);
  }
  const std::string id = SimClientId(job->client);
  if (!job->outcome.ok()) {
    return Fail(job->outcome.status().WithContext("evaluating on " + id));
  }
  // A refusal (no held-out rows) is silent, as on a real node: the evaluation closes at its
  // deadline without this client.
  if (!job->outcome->refused.empty()) return;
  if (!job->trip.ok()) return Fail(job->trip.status().WithContext("sending from " + id));
  const uint64_t bytes = job->trip->bytes;
  if (Status s = net_.Send(id, kAggregator, std::move(*job->trip)); s.ok()) {
    eval_up_ += bytes;
  } else if (!net_.IsDown(id)) {
    Fail(s);
  }
}

void AggregatorSim::RecordEval(const FederatedEvalReport& report) {
  SimFederatedEval e;
  e.report = report;
  e.sim_time_s = env_.NowSeconds();
  e.bytes_down = eval_down_ - eval_mark_down_;
  e.bytes_up = eval_up_ - eval_mark_up_;
  eval_mark_down_ = eval_down_;
  eval_mark_up_ = eval_up_;
  if (Status s = ctx_.report_eval(e); !s.ok()) Fail(s);
}

void AggregatorSim::CloseRoundMetrics(const RoundEngine::RoundClosed& closed) {
  const uint64_t total = net_.total_bytes_sent(), down = net_.bytes_sent(kAggregator);
  SimRoundMetrics m;
  m.round = closed.round;
  m.sim_time_s = env_.NowSeconds();
  if (closed.metrics.test_accuracy && std::isfinite(*closed.metrics.test_accuracy)) {
    m.test_accuracy = closed.metrics.test_accuracy;
    m.test_loss = closed.metrics.test_loss;
  }
  if (closed.metrics.privacy) {
    m.epsilon = closed.metrics.privacy->epsilon;
    m.clip_norm = closed.metrics.privacy->clip_norm;
  }
  if (o_.privacy.enabled()) {
    auto most = MaxClientEpsilon();
    if (!most.ok()) return Fail(most.status());
    m.dp_sgd_epsilon_max = *most;
  }
  m.participants = closed.metrics.received;
  m.dropped = closed.metrics.selected - std::min(closed.metrics.selected, closed.metrics.received);
  // Evaluation tasks and answers since the last close belong to the evaluations' lines.
  const uint64_t eval_down = eval_down_ - round_mark_eval_down_;
  const uint64_t eval_up = eval_up_ - round_mark_eval_up_;
  m.bytes_down = down - mark_down_ - eval_down;
  m.bytes_up = (total - mark_total_) - (down - mark_down_) - eval_up;
  mark_total_ = total;
  mark_down_ = down;
  round_mark_eval_down_ = eval_down_;
  round_mark_eval_up_ = eval_up_;
  if (Status s = ctx_.report(m); !s.ok()) Fail(s);
}

Status AggregatorSim::ShareAnswer(uint64_t client, Result<FitOutcome>& outcome,
                                  Result<WireTrip>& trip, std::vector<wire::Frame>& frames) {
  if (!ctx_.sharded()) return Status::OK();
  const int owner = ctx_.shards.OwnerOf(client);
  const bool mine = owner == ctx_.ranks->rank();
  std::vector<uint8_t> bytes;
  if (mine) {
    ClientAnswer a;
    if (!outcome.ok()) {
      a.job_status = outcome.status();
    } else if (!outcome->refused.empty()) {
      a.refused = outcome->refused;
    } else if (!trip.ok()) {
      a.send_status = trip.status();
    } else {
      a.frames = std::move(frames);
    }
    bytes = EncodeClientAnswer(a);
  }
  frames = {};
  FM_RETURN_IF_ERROR(ctx_.ranks->Broadcast(owner, bytes,
                                           [this] { return ctx_.workers.RunOneQueued(); }));
  if (mine) return Status::OK();
  FM_ASSIGN_OR_RETURN(ClientAnswer a, DecodeClientAnswer(bytes));
  if (!a.job_status.ok()) {
    outcome = a.job_status;
    return Status::OK();
  }
  FitOutcome out;
  out.refused = std::move(a.refused);
  outcome = std::move(out);
  if (!outcome->refused.empty()) return Status::OK();
  if (!a.send_status.ok()) {
    trip = a.send_status;
    return Status::OK();
  }
  trip = InProcessNetwork::Receive(a.frames, net_.limits());
  return trip.status().WithContext("the answer of " + SimClientId(client) + " from rank " +
                                   std::to_string(owner));
}

Result<double> AggregatorSim::MaxClientEpsilon() {
  double most = 0.0;
  {
    std::lock_guard<std::mutex> lock(ledgers_mu_);
    for (const auto& [client, ledger] : ledgers_) most = std::max(most, ledger->epsilon());
  }
  if (!ctx_.sharded()) return most;
  FM_ASSIGN_OR_RETURN(auto all, ctx_.ranks->Allgather(std::span<const uint8_t>(
                                    reinterpret_cast<const uint8_t*>(&most), sizeof most)));
  for (const auto& part : all) {
    if (part.size() != sizeof most) return Status::Internal("a rank sent a malformed epsilon");
    double theirs;
    std::memcpy(&theirs, part.data(), sizeof theirs);
    most = std::max(most, theirs);
  }
  return most;
}

}  // namespace

Result<std::vector<float>> RunAggregatorMode(SimContext& ctx) {
  AggregatorSim sim(ctx);
  Result<std::vector<float>> global = Status::Internal("the simulation did not run");
  ctx.workers.Serve([&] { global = sim.Run(); });
  return global;
}

}  // namespace fedmesh::sim_internal
