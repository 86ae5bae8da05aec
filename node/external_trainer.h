// ExternalTrainer: the node's end of the bridge to a site's own training program
// ([train] external / external_endpoint, docs/external-trainer.md). It listens on a
// Unix-domain socket in a directory of mode 0700, starts the program (or waits for the one
// the site runs), and for each task sends the global model as named float32 tensors and
// reads back the trained tensors, the number of examples and the metrics
// (node/trainer_protocol.h). It trusts nothing the trainer sends: a crash, a hang past the
// deadline, garbage bytes, a missing, extra or misshaped tensor, a non-finite value or a
// trainer that never connects fails that task with a reason, the trainer is killed (its
// process group) and started again for the next task after a doubling backoff. Failures
// are returned, never thrown or fatal: the node goes on.
// Thread-safety: one thread drives it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "node/trainer_process.h"
#include "node/trainer_protocol.h"

namespace fedmesh {

struct ExternalTrainerOptions {
  // [train] external: the program to start (argv, no shell). Empty: attach mode.
  std::vector<std::string> argv;
  // [train] launch = "per_task": a fresh process for every task, told to shut down after
  // its answer. Default false ("once": one process for all tasks, restarted after a fault).
  bool per_task = false;
  // [train] external_endpoint, "ipc://ABSOLUTE_PATH": listen there and wait for a trainer
  // the site runs itself. Its directory must exist, belong to this user and have mode
  // 0700. Empty (the default): a fresh private directory under $TMPDIR (else /tmp).
  std::string endpoint;
  std::string cwd;      // the started trainer's working directory; empty = the node's
  std::string node_id;  // FEDMESH_NODE_ID of a started trainer
  // Longest wait for one answer; 0 (the default) = the task's deadline only, 24 h when it
  // has none. The shorter of the two applies.
  int64_t timeout_ms = 0;
  // How long a (re)started trainer may take to connect and send its hello. Default 30 s.
  int64_t connect_timeout_ms = 30000;
  // Delay before restarting after a failure; doubles per consecutive failure up to
  // kMaxRestartBackoffMs and resets after a task succeeds. Default 1 s.
  int64_t restart_backoff_ms = 1000;
  // One line per event (start, connect, failure); may be empty.
  std::function<void(const std::string&)> log;

  bool enabled() const { return !argv.empty() || !endpoint.empty(); }
};

inline constexpr int64_t kMaxRestartBackoffMs = 60000;

// A trainer's answer to one task.
struct TrainerAnswer {
  uint64_t num_examples = 0;
  std::map<std::string, double> metrics;
  // fit: the request's tensors, flat, in request order; all finite. evaluate: empty.
  std::vector<float> values;
};

class ExternalTrainer {
 public:
  // Opens the socket and, with argv and launch "once", starts the trainer (not waiting
  // for it). InvalidArgument naming the key for a bad endpoint or directory.
  static Result<std::unique_ptr<ExternalTrainer>> Create(ExternalTrainerOptions options);
  // Tells a connected trainer to shut down, stops the process and removes the socket
  // (and the directory made for it).
  ~ExternalTrainer();
  ExternalTrainer(const ExternalTrainer&) = delete;
  ExternalTrainer& operator=(const ExternalTrainer&) = delete;

  // Runs one task: `weights` are the request's tensors, flat in request order (REQUIRES:
  // weights.size() * 4 == PayloadBytes(request.tensors)). A failed task is an error
  // Status whose message is the reason (DeadlineExceeded for a hang or a trainer that never
  // connected, Unavailable for a crash or a closed socket, InvalidArgument for a bad
  // answer, FailedPrecondition for an error the trainer reported, Unavailable "the node is
  // stopping" when stop() became true). request.task_id is set here.
  Result<TrainerAnswer> Run(trainer::TaskRequest request, std::span<const float> weights,
                            const std::function<bool()>& stop = {});

  // Waits (up to connect_timeout_ms) until a trainer is connected, starting one if this
  // node launches it. Returns the example count its hello gave, if any.
  Result<std::optional<uint64_t>> Connect(const std::function<bool()>& stop = {});

  const std::string& endpoint() const { return endpoint_; }
  // The example count of the last hello, if it gave one.
  std::optional<uint64_t> hello_examples() const { return hello_examples_; }
  uint64_t tasks_failed() const { return tasks_failed_; }
  uint64_t starts() const { return starts_; }
  bool launches() const { return !options_.argv.empty(); }

 private:
  using Clock = std::chrono::steady_clock;
  explicit ExternalTrainer(ExternalTrainerOptions options);
  void Log(const std::string& line) const;
  // Starts the trainer when this node launches it and it is not running (after the
  // restart backoff, which `deadline` bounds).
  Status StartIfNeeded(Clock::time_point deadline, const std::function<bool()>& stop);
  // Accepts (starting the trainer first when this node launches it) and reads the hello.
  Status EnsureConnected(Clock::time_point deadline, const std::function<bool()>& stop);
  Status ReadExact(void* data, size_t n, Clock::time_point deadline,
                   const std::function<bool()>& stop, const std::string& doing);
  Status WriteExact(const void* data, size_t n, Clock::time_point deadline,
                    const std::function<bool()>& stop, const std::string& doing);
  Status SendFrame(const std::string& header, std::span<const float> payload,
                   Clock::time_point deadline, const std::function<bool()>& stop,
                   const std::string& doing);
  // Reads a frame's prefix and header (not its payload).
  Result<std::pair<trainer::FramePrefix, trainer::TrainerMessage>> ReadHeader(
      uint64_t max_payload, Clock::time_point deadline, const std::function<bool()>& stop,
      const std::string& doing);
  // Ends the connection and (when launched) the process, and schedules the restart.
  // Returns `failure` with how the process ended added when it had died.
  Status Drop(Status failure);
  void CloseConnection();
  // "the trainer was killed by signal 9 (Killed)" when the launched process is gone.
  std::string ProcessEnd();

  ExternalTrainerOptions options_;
  std::string endpoint_, socket_path_, own_dir_;
  int listen_fd_ = -1;
  int conn_fd_ = -1;
  std::optional<TrainerProcess> process_;
  std::optional<uint64_t> hello_examples_;
  uint64_t next_task_id_ = 1;
  uint64_t tasks_failed_ = 0, starts_ = 0;
  int consecutive_failures_ = 0;
  Clock::time_point next_start_{};
};

}  // namespace fedmesh
