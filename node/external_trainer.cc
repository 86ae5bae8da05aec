#include "node/external_trainer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

namespace fedmesh {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kPollSliceMs = 100;  // how often waits look at stop() and the process
constexpr int64_t kNoDeadlineMs = 24LL * 3600 * 1000;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int SliceMs(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, kPollSliceMs));
}

std::string Seconds(int64_t ms) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f s", static_cast<double>(ms) / 1000.0);
  return b;
}

Status Stopping() { return Status::Unavailable("the node is stopping"); }

// The directory of an attached trainer's socket must be this user's alone: anyone who can
// reach the socket could answer in the trainer's place.
Status CheckPrivateDirectory(const std::string& dir, const std::string& key) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0)
    return Status::InvalidArgument(key + ": directory " + dir + " does not exist (" + std::strerror(errno) + ")");
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(key + ": " + dir + " is not a directory");
  if (st.st_uid != ::geteuid())
    return Status::InvalidArgument(key + ": directory " + dir + " belongs to uid " +
                                   std::to_string(st.st_uid) + ", not to this node's uid " +
                                   std::to_string(::geteuid()));
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", st.st_mode & 07777);
    return Status::InvalidArgument(key + ": directory " + dir + " has mode " + mode +
                                   "; it must be 0700 (chmod 700 " + dir + ")");
  }
  return Status::OK();
}

}  // namespace

ExternalTrainer::ExternalTrainer(ExternalTrainerOptions options) : options_(std::move(options)) {}

void ExternalTrainer::Log(const std::string& line) const {
  if (options_.log) options_.log(line);
}

Result<std::unique_ptr<ExternalTrainer>> ExternalTrainer::Create(ExternalTrainerOptions options) {
  if (options.argv.empty() == options.endpoint.empty()) {
    return Status::InvalidArgument(
        "[train] external and [train] external_endpoint: set exactly one of them");
  }
  if (options.connect_timeout_ms <= 0) options.connect_timeout_ms = 30000;
  std::unique_ptr<ExternalTrainer> t(new ExternalTrainer(std::move(options)));
  const ExternalTrainerOptions& o = t->options_;
  if (!o.argv.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/fedmesh-trainer-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      return Status::IOError("cannot make a directory for the trainer's socket (" + pattern +
                             "): " + std::strerror(errno));
    t->own_dir_ = pattern;  // mkdtemp makes it 0700
    t->socket_path_ = pattern + "/trainer.sock";
  } else {
    const std::string key = "[train] external_endpoint";
    if (o.endpoint.rfind("ipc://", 0) != 0 || o.endpoint.size() <= 7 || o.endpoint[6] != '/')
      return Status::InvalidArgument(key + " is \"" + o.endpoint +
                                     "\"; it must be ipc:// followed by an absolute path");
    t->socket_path_ = o.endpoint.substr(6);
    const std::string dir = t->socket_path_.substr(0, t->socket_path_.rfind('/'));
    FM_RETURN_IF_ERROR(CheckPrivateDirectory(dir.empty() ? "/" : dir, key));
    struct stat st{};
    if (::lstat(t->socket_path_.c_str(), &st) == 0) {
      if (!S_ISSOCK(st.st_mode))
        return Status::InvalidArgument(key + ": " + t->socket_path_ + " exists and is not a socket");
      ::unlink(t->socket_path_.c_str());  // a stale socket of an earlier run
    }
  }
  t->endpoint_ = "ipc://" + t->socket_path_;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (t->socket_path_.size() >= sizeof(addr.sun_path))
    return Status::InvalidArgument("the trainer socket path " + t->socket_path_ + " is over " +
                                   std::to_string(sizeof(addr.sun_path) - 1) + " bytes");
  std::memcpy(addr.sun_path, t->socket_path_.c_str(), t->socket_path_.size() + 1);
  t->listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (t->listen_fd_ < 0) return Status::IOError(std::string("socket: ") + std::strerror(errno));
  if (::bind(t->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(t->listen_fd_, 4) != 0) {
    return Status::IOError("cannot listen on " + t->endpoint_ + ": " + std::strerror(errno));
  }
  ::chmod(t->socket_path_.c_str(), 0600);
  if (t->launches() && !t->options_.per_task) {
    // Started now, so it loads its data while the node registers; failures show at the
    // first Connect or task.
    FM_RETURN_IF_ERROR(t->StartIfNeeded(Clock::now(), {}).WithContext("[train] external"));
  }
  return t;
}

ExternalTrainer::~ExternalTrainer() {
  if (conn_fd_ >= 0) {
    const std::string h = trainer::EncodeShutdownHeader();
    (void)SendFrame(h, {}, Clock::now() + std::chrono::milliseconds(500), {}, "shutting down");
    CloseConnection();
  }
  if (process_) {
    const std::string how = process_->Stop(/*timeout_ms=*/3000, /*grace_ms=*/2000);
    if (!how.empty()) Log("the trainer " + how);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (!socket_path_.empty()) ::unlink(socket_path_.c_str());
  if (!own_dir_.empty()) ::rmdir(own_dir_.c_str());
}

void ExternalTrainer::CloseConnection() {
  if (conn_fd_ >= 0) ::close(conn_fd_);
  conn_fd_ = -1;
}

std::string ExternalTrainer::ProcessEnd() {
  if (!process_) return "";
  std::string how;
  // A crash closes the socket a moment before the process is reaped.
  for (int i = 0; i < 40 && !process_->Exited(&how); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return how;
}

Status ExternalTrainer::Drop(Status failure) {
  CloseConnection();
  std::string message = failure.message();
  if (process_) {
    std::string how;
    if (process_->Exited(&how)) {
      message += " (the trainer " + how + ")";
    } else {
      process_->Kill();
    }
    process_.reset();
  }
  ++tasks_failed_;
  ++consecutive_failures_;
  if (launches()) {
    const int64_t backoff = std::min<int64_t>(
        kMaxRestartBackoffMs,
        std::max<int64_t>(0, options_.restart_backoff_ms) << std::min(consecutive_failures_ - 1, 16));
    next_start_ = Clock::now() + std::chrono::milliseconds(backoff);
  }
  return Status(failure.code(), message);
}

Status ExternalTrainer::StartIfNeeded(Clock::time_point deadline, const std::function<bool()>& stop) {
  if (!launches()) return Status::OK();
  std::string how;
  if (process_ && process_->Exited(&how)) {
    Log("the trainer " + how + "; starting it again");
    process_.reset();
  }
  if (process_) return Status::OK();
  // Backoff after failures, bounded by the task's own deadline.
  while (Clock::now() < next_start_) {
    if (stop && stop()) return Stopping();
    if (Clock::now() >= deadline)
      return Status::DeadlineExceeded("the trainer was not restarted before the deadline (backing off after " +
                                      std::to_string(consecutive_failures_) + " failure(s))");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(SliceMs(next_start_), SliceMs(deadline)) + 1));
  }
  TrainerProcessOptions p;
  p.argv = options_.argv;
  p.cwd = options_.cwd;
  p.env = {{"FEDMESH_TRAINER_ENDPOINT", endpoint_}, {"FEDMESH_NODE_ID", options_.node_id}};
  FM_ASSIGN_OR_RETURN(TrainerProcess spawned, TrainerProcess::Spawn(p));
  process_.emplace(std::move(spawned));
  ++starts_;
  Log("started the trainer (pid " + std::to_string(process_->pid()) + "): " + options_.argv[0] + " on " +
      endpoint_);
  return Status::OK();
}

Status ExternalTrainer::EnsureConnected(Clock::time_point deadline, const std::function<bool()>& stop) {
  if (conn_fd_ >= 0) return Status::OK();
  FM_RETURN_IF_ERROR(StartIfNeeded(deadline, stop));
  const auto started_waiting = Clock::now();
  while (true) {
    if (stop && stop()) return Stopping();
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      ucred cred{};
      socklen_t len = sizeof(cred);
      if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::geteuid()) {
        Log("refused a trainer connection from uid " + std::to_string(cred.uid) +
            " (only this node's uid may connect)");
        ::close(fd);
        continue;
      }
      conn_fd_ = fd;
      break;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      return Status::IOError("accepting the trainer's connection: " + std::string(std::strerror(errno)));
    std::string how;
    if (process_ && process_->Exited(&how)) {
      const std::string why = "the trainer " + how + " before it connected to " + endpoint_;
      process_.reset();
      return Status::Unavailable(why);
    }
    if (Clock::now() >= deadline) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_waiting).count();
      return Status::DeadlineExceeded("the trainer did not connect to " + endpoint_ + " within " +
                                      Seconds(waited));
    }
    pollfd p{listen_fd_, POLLIN, 0};
    ::poll(&p, 1, SliceMs(deadline));
  }
  auto hello = ReadHeader(/*max_payload=*/0, deadline, stop, "waiting for the trainer's hello");
  if (!hello.ok()) {
    CloseConnection();
    return hello.status();
  }
  if (hello->second.type != trainer::TrainerMessage::Type::kHello) {
    CloseConnection();
    return Status::InvalidArgument("the trainer's first message must be a hello");
  }
  hello_examples_ = hello->second.hello_examples;
  Log("trainer connected" + (hello->second.name.empty() ? "" : " (" + hello->second.name + ")") +
      (hello_examples_ ? ", " + std::to_string(*hello_examples_) + " training examples" : ""));
  return Status::OK();
}

Result<std::optional<uint64_t>> ExternalTrainer::Connect(const std::function<bool()>& stop) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.connect_timeout_ms);
  Status s = EnsureConnected(deadline, stop);
  if (!s.ok()) return Drop(s);
  return hello_examples_;
}

Status ExternalTrainer::ReadExact(void* data, size_t n, Clock::time_point deadline,
                                  const std::function<bool()>& stop, const std::string& doing) {
  auto* p = static_cast<uint8_t*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::recv(conn_fd_, p + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) {
      const std::string how = ProcessEnd();
      return Status::Unavailable("the trainer " + (how.empty() ? "closed the connection" : how) +
                                 " while " + doing);
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK)
      return Status::Unavailable("reading from the trainer failed while " + doing + ": " + std::strerror(errno));
    if (stop && stop()) return Stopping();
    if (Clock::now() >= deadline) return Status::DeadlineExceeded("the trainer did not answer in time while " + doing);
    std::string how;
    if (process_ && process_->Exited(&how)) return Status::Unavailable("the trainer " + how + " while " + doing);
    pollfd pf{conn_fd_, POLLIN, 0};
    ::poll(&pf, 1, SliceMs(deadline));
  }
  return Status::OK();
}

Status ExternalTrainer::WriteExact(const void* data, size_t n, Clock::time_point deadline,
                                   const std::function<bool()>& stop, const std::string& doing) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::send(conn_fd_, p + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      const std::string how = ProcessEnd();
      return Status::Unavailable("the trainer " + (how.empty() ? "closed the connection" : how) +
                                 " while " + doing);
    }
    if (stop && stop()) return Stopping();
    if (Clock::now() >= deadline) return Status::DeadlineExceeded("the trainer did not read its task in time");
    pollfd pf{conn_fd_, POLLOUT, 0};
    ::poll(&pf, 1, SliceMs(deadline));
  }
  return Status::OK();
}

Status ExternalTrainer::SendFrame(const std::string& header, std::span<const float> payload,
                                  Clock::time_point deadline, const std::function<bool()>& stop,
                                  const std::string& doing) {
  const auto prefix = trainer::EncodePrefix(static_cast<uint32_t>(header.size()), payload.size_bytes());
  std::string head(reinterpret_cast<const char*>(prefix.data()), prefix.size());
  head += header;
  FM_RETURN_IF_ERROR(WriteExact(head.data(), head.size(), deadline, stop, doing));
  // Straight from the caller's buffer: the weights are not copied on the node's side.
  return WriteExact(payload.data(), payload.size_bytes(), deadline, stop, doing);
}

Result<std::pair<trainer::FramePrefix, trainer::TrainerMessage>> ExternalTrainer::ReadHeader(
    uint64_t max_payload, Clock::time_point deadline, const std::function<bool()>& stop,
    const std::string& doing) {
  std::array<uint8_t, trainer::kPrefixBytes> prefix{};
  FM_RETURN_IF_ERROR(ReadExact(prefix.data(), prefix.size(), deadline, stop, doing));
  FM_ASSIGN_OR_RETURN(trainer::FramePrefix p, trainer::ParsePrefix(prefix, max_payload));
  std::string header(p.header_length, '\0');
  FM_RETURN_IF_ERROR(ReadExact(header.data(), header.size(), deadline, stop, doing));
  FM_ASSIGN_OR_RETURN(trainer::TrainerMessage m, trainer::ParseTrainerHeader(header));
  return std::make_pair(p, std::move(m));
}

Result<TrainerAnswer> ExternalTrainer::Run(trainer::TaskRequest request, std::span<const float> weights,
                                           const std::function<bool()>& stop) {
  const uint64_t expected_bytes = trainer::PayloadBytes(request.tensors);
  if (weights.size_bytes() != expected_bytes)
    return Status::Internal("ExternalTrainer::Run: weights do not match the request's tensors");
  // The deadline: the task's (a wall-clock time) capped by [train] external_timeout_s.
  int64_t budget_ms = kNoDeadlineMs;
  if (request.deadline_unix_ms != 0)
    budget_ms = std::max<int64_t>(0, static_cast<int64_t>(request.deadline_unix_ms) - NowUnixMs());
  if (options_.timeout_ms > 0) budget_ms = std::min(budget_ms, options_.timeout_ms);
  const auto deadline = Clock::now() + std::chrono::milliseconds(budget_ms);
  const std::string what = request.kind + " task of round " + std::to_string(request.round);

  auto fail = [&](Status s) -> Status {
    if (s.message() == Stopping().message()) {
      CloseConnection();
      return s;
    }
    Status dropped = Drop(std::move(s));
    Log("the trainer failed the " + what + ": " + dropped.message());
    return dropped;
  };
  const auto connect_deadline =
      std::min(deadline, Clock::now() + std::chrono::milliseconds(options_.connect_timeout_ms));
  if (Status s = EnsureConnected(connect_deadline, stop); !s.ok()) return fail(s);

  request.task_id = next_task_id_++;
  if (Status s = SendFrame(trainer::EncodeTaskHeader(request), weights, deadline, stop,
                           "sending it the " + what);
      !s.ok()) {
    return fail(s);
  }
  const bool fit = request.kind == "fit";
  auto header = ReadHeader(fit ? expected_bytes : 0, deadline, stop, "waiting for its answer to the " + what);
  if (!header.ok()) {
    Status s = header.status();
    if (s.code() == StatusCode::kDeadlineExceeded) {
      s = Status::DeadlineExceeded("the trainer did not answer the " + what + " within " +
                                   Seconds(budget_ms));
    }
    return fail(s);
  }
  auto& [prefix, m] = *header;
  using Type = trainer::TrainerMessage::Type;
  if (m.type == Type::kHello) return fail(Status::InvalidArgument("the trainer sent a second hello"));
  if (m.task_id != request.task_id)
    return fail(Status::InvalidArgument("the trainer answered task " + std::to_string(m.task_id) +
                                        "; the open task is " + std::to_string(request.task_id)));
  if (m.type == Type::kError) {
    if (prefix.payload_length != 0) return fail(Status::InvalidArgument("the trainer's error carries a payload"));
    return fail(Status::FailedPrecondition("the trainer reported: " + m.message));
  }
  TrainerAnswer answer;
  answer.num_examples = m.num_examples;
  answer.metrics = std::move(m.metrics);
  if (!fit) {
    if (!m.tensors.empty() || prefix.payload_length != 0)
      return fail(Status::InvalidArgument("the trainer's answer to an evaluate task carries tensors"));
  } else {
    auto order = trainer::MatchTensors(request.tensors, m.tensors);
    if (!order.ok()) return fail(order.status());
    if (prefix.payload_length != expected_bytes)
      return fail(Status::InvalidArgument("the trainer's answer carries " + std::to_string(prefix.payload_length) +
                                          " payload bytes; its tensors need " + std::to_string(expected_bytes)));
    answer.values.resize(weights.size());
    const bool in_order = std::is_sorted(order->begin(), order->end());
    std::vector<float> staging;
    float* into = answer.values.data();
    if (!in_order) {
      staging.resize(weights.size());
      into = staging.data();
    }
    if (Status s = ReadExact(into, expected_bytes, deadline, stop, "reading its answer to the " + what); !s.ok())
      return fail(s);
    std::vector<uint64_t> offsets(request.tensors.size() + 1, 0);
    for (size_t i = 0; i < request.tensors.size(); ++i) offsets[i + 1] = offsets[i] + request.tensors[i].elements();
    if (!in_order) {
      uint64_t at = 0;
      for (size_t k = 0; k < order->size(); ++k) {
        const size_t i = (*order)[k];
        std::copy_n(staging.data() + at, request.tensors[i].elements(), answer.values.data() + offsets[i]);
        at += request.tensors[i].elements();
      }
    }
    for (size_t i = 0; i < request.tensors.size(); ++i) {
      for (uint64_t j = offsets[i]; j < offsets[i + 1]; ++j) {
        if (!std::isfinite(answer.values[j])) {
          char v[32];
          std::snprintf(v, sizeof(v), "%g", static_cast<double>(answer.values[j]));
          return fail(Status::InvalidArgument("the trainer's tensor '" + request.tensors[i].name + "' holds " +
                                              v + " at index " + std::to_string(j - offsets[i])));
        }
      }
    }
  }
  if (answer.num_examples == 0)
    return fail(Status::InvalidArgument("the trainer's answer to the " + what + " reports 0 examples"));
  consecutive_failures_ = 0;
  if (options_.per_task) {
    (void)SendFrame(trainer::EncodeShutdownHeader(), {}, Clock::now() + std::chrono::seconds(1), stop, "shutting down");
    CloseConnection();
    if (process_) {
      const std::string how = process_->Stop(/*timeout_ms=*/5000, /*grace_ms=*/2000);
      process_.reset();
      (void)how;
    }
  }
  return answer;
}

}  // namespace fedmesh
