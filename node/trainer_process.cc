#include "node/trainer_process.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

extern char** environ;

namespace fedmesh {

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return "was killed by signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

Result<TrainerProcess> TrainerProcess::Spawn(const TrainerProcessOptions& o) {
  if (o.argv.empty() || o.argv[0].empty()) return Status::InvalidArgument("the trainer's argv is empty");
  // Everything the child needs is built before the spawn (no allocation after it).
  std::vector<std::string> env_strings;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    bool replaced = false;
    for (const auto& [k, v] : o.env)
      if (kv.size() > k.size() && kv.substr(0, k.size()) == k && kv[k.size()] == '=') replaced = true;
    if (!replaced) env_strings.emplace_back(kv);
  }
  for (const auto& [k, v] : o.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, o.cwd.c_str());
  // Its own process group (the node kills the group), default signal handling and mask.
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    const std::string what = "cannot start the trainer '" + o.argv[0] + "'" +
                             (o.cwd.empty() ? "" : " in " + o.cwd) + ": " + std::strerror(rc);
    if (rc == ENOENT) return Status::NotFound(what);
    if (rc == EACCES) return Status::PermissionDenied(what);
    return Status::IOError(what);
  }
  return TrainerProcess(pid);
}

TrainerProcess::TrainerProcess(TrainerProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), reaped_(other.reaped_), how_(std::move(other.how_)) {}

TrainerProcess& TrainerProcess::operator=(TrainerProcess&& other) noexcept {
  if (this != &other) {
    Kill();
    pid_ = std::exchange(other.pid_, -1);
    reaped_ = other.reaped_;
    how_ = std::move(other.how_);
  }
  return *this;
}

TrainerProcess::~TrainerProcess() { Kill(); }

bool TrainerProcess::Exited(std::string* how) {
  if (pid_ <= 0) return true;
  if (!reaped_) {
    // Peek first (WNOWAIT): while the exited leader is a zombie its pid cannot be reused,
    // so killing what is left of its group cannot hit an unrelated process.
    siginfo_t info{};
    const int r = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && info.si_pid == pid_) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      reaped_ = true;
      how_ = DescribeExit(status);
    } else if (r < 0 && errno == ECHILD) {
      reaped_ = true;
      how_ = "exited (status unknown)";
    }
  }
  if (reaped_ && how != nullptr) *how = how_;
  return reaped_;
}

bool TrainerProcess::WaitFor(int timeout_ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!Exited()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::string TrainerProcess::Stop(int timeout_ms, int grace_ms) {
  if (pid_ <= 0) return how_;
  if (!WaitFor(timeout_ms)) {
    ::kill(-pid_, SIGTERM);
    if (!WaitFor(grace_ms)) Kill();
  }
  std::string how;
  Exited(&how);
  return how;
}

void TrainerProcess::Kill() {
  if (pid_ <= 0) return;
  if (!reaped_) {
    ::kill(-pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    how_ = DescribeExit(status);
  }
}

}  // namespace fedmesh
