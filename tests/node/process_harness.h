// Test helpers that run real fedmesh binaries as child processes: spawn with the output in
// a log file, wait with a deadline, SIGKILL on teardown. Every child also gets
// PR_SET_PDEATHSIG = SIGKILL, so a test binary that dies (or is killed by a CTest timeout)
// takes its children with it.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace fedmesh::testing {

using Clock = std::chrono::steady_clock;

inline std::string ReadWholeFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The numeric value of "key" in one flat JSON line (metrics files); nullopt when absent.
inline std::optional<double> JsonNumber(const std::string& line, const std::string& key) {
  const std::string pat = "\"" + key + "\"";
  size_t at = line.find(pat);
  if (at == std::string::npos) return std::nullopt;
  at += pat.size();
  while (at < line.size() && (line[at] == ' ' || line[at] == ':')) ++at;
  char* end = nullptr;
  const double v = std::strtod(line.c_str() + at, &end);
  if (end == line.c_str() + at) return std::nullopt;
  return v;
}

// The non-empty lines of `text` (a JSON-lines file read whole).
inline std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Polls `pred` every 10 ms until it is true or `timeout` passed. Returns pred's last value.
inline bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (Clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// One child process. The destructor SIGKILLs and reaps it if it is still running.
class ChildProcess {
 public:
  // Starts `argv[0]` with `argv`, in `cwd`, with the parent's environment plus `env`
  // (NAME=VALUE entries override), stdout and stderr appended to `log`. Returns null when
  // fork fails. An exec failure shows as exit code 127 and a line in the log.
  static std::unique_ptr<ChildProcess> Spawn(std::string name, const std::vector<std::string>& argv,
                                             const std::filesystem::path& cwd,
                                             const std::filesystem::path& log,
                                             const std::map<std::string, std::string>& env = {}) {
    // Everything the child needs is built before fork: after it only async-signal-safe calls.
    std::vector<std::string> env_strings;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      std::string s(*e);
      const std::string key = s.substr(0, s.find('='));
      if (env.count(key) == 0) env_strings.push_back(std::move(s));
    }
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = argv;
    std::vector<char*> argp;
    for (auto& s : args) argp.push_back(s.data());
    argp.push_back(nullptr);
    const std::string cwd_s = cwd.string();
    const std::string log_s = log.string();
    const pid_t parent = getpid();

    const pid_t pid = fork();
    if (pid < 0) return nullptr;
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(126);  // the parent died before prctl
      // A fresh process group, so that a terminal's signals do not reach it.
      setpgid(0, 0);
      const int fd = open(log_s.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      const int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, STDIN_FILENO);
      if (chdir(cwd_s.c_str()) != 0) _exit(125);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execve(argp[0], argp.data(), envp.data());
      static const char kMsg[] = "exec failed\n";
      (void)!write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
      _exit(127);
    }
    return std::unique_ptr<ChildProcess>(new ChildProcess(std::move(name), pid, log));
  }

  ~ChildProcess() { Kill(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  const std::filesystem::path& log_path() const { return log_; }
  std::string Log() const { return ReadWholeFile(log_); }

  // True while the process has not exited (reaps it when it has).
  bool Running() {
    Reap(false);
    return !exit_code_.has_value();
  }

  // Waits up to `timeout` for the exit. Returns the exit code, 128 + signal when it was
  // killed by a signal, or nullopt when it is still running.
  std::optional<int> WaitExit(std::chrono::milliseconds timeout) {
    WaitUntil([&] { return !Running(); }, timeout);
    return exit_code_;
  }

  void Signal(int signo) {
    if (Running()) ::kill(pid_, signo);
  }

  // SIGKILL and reap (blocking: a SIGKILLed process always goes).
  void Kill() {
    if (exit_code_.has_value()) return;
    ::kill(pid_, SIGKILL);
    Reap(true);
  }

 private:
  ChildProcess(std::string name, pid_t pid, std::filesystem::path log)
      : name_(std::move(name)), pid_(pid), log_(std::move(log)) {}

  void Reap(bool block) {
    if (exit_code_.has_value()) return;
    int status = 0;
    pid_t r;
    do {
      r = waitpid(pid_, &status, block ? 0 : WNOHANG);
    } while (r < 0 && errno == EINTR);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status)
                                     : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1);
    } else if (r < 0) {
      exit_code_ = -1;  // not our child any more (should not happen)
    }
  }

  std::string name_;
  pid_t pid_;
  std::filesystem::path log_;
  std::optional<int> exit_code_;
};

// Runs a command to completion (bounded); returns the exit code or nullopt on timeout (the
// child is then killed).
inline std::optional<int> RunToCompletion(const std::vector<std::string>& argv,
                                          const std::filesystem::path& cwd,
                                          const std::filesystem::path& log,
                                          std::chrono::milliseconds timeout) {
  auto child = ChildProcess::Spawn(argv[0], argv, cwd, log);
  if (!child) return std::nullopt;
  return child->WaitExit(timeout);
}

// A shell command's exit code and its stdout and stderr together.
struct ShellResult {
  int exit_code = -1;  // -1 when it did not exit normally
  std::string output;
};

// Runs `cmd` through /bin/sh and waits for it. Passive OpenMP waiting: ~3% slower alone,
// but a binary that shares the cores with anything else does not collapse
// (bench/RESULTS.md, "OpenMP wait policy").
inline ShellResult RunShell(const std::string& cmd) {
  ShellResult r;
  FILE* p = popen(("OMP_WAIT_POLICY=passive " + cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace fedmesh::testing
