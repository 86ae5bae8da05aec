// TrainerProcess: a site's trainer program started by fedmesh-node ([train] external):
// argv as given (no shell), in its own process group so that killing it also kills what
// it started (DataLoader workers), with extra environment variables and a working
// directory. The owner kills and reaps the whole group on destruction, so a node never
// leaves a trainer or a zombie behind. Thread-safety: one owner thread.
#pragma once

#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

#include "core/status.h"

namespace fedmesh {

struct TrainerProcessOptions {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH; required, non-empty
  std::string cwd;                // empty = the node's own working directory
  // Added to (or replacing in) the node's environment.
  std::vector<std::pair<std::string, std::string>> env;
};

class TrainerProcess {
 public:
  // Starts the program. NotFound / PermissionDenied (naming argv[0]) when it cannot be
  // executed; IOError for other spawn failures.
  static Result<TrainerProcess> Spawn(const TrainerProcessOptions& options);

  TrainerProcess(TrainerProcess&& other) noexcept;
  TrainerProcess& operator=(TrainerProcess&& other) noexcept;
  TrainerProcess(const TrainerProcess&) = delete;
  TrainerProcess& operator=(const TrainerProcess&) = delete;
  ~TrainerProcess();  // Kill()

  pid_t pid() const { return pid_; }
  // True once it has exited (reaped here); `how` then says how ("exited with code 1",
  // "was killed by signal 9 (Killed)").
  bool Exited(std::string* how = nullptr);
  // Waits up to timeout_ms for it to exit on its own, then SIGTERMs the group, waits
  // grace_ms more and SIGKILLs it. Returns how it ended.
  std::string Stop(int timeout_ms, int grace_ms);
  // SIGKILL to the whole group, then reaps it.
  void Kill();

 private:
  explicit TrainerProcess(pid_t pid) : pid_(pid) {}
  bool WaitFor(int timeout_ms);
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string how_;
};

// "exited with code N" / "was killed by signal N (name)" for a waitpid status.
std::string DescribeExit(int wait_status);

}  // namespace fedmesh
