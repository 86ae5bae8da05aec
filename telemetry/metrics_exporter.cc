#include "telemetry/metrics_exporter.h"

#include "core/host_port.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace fedmesh {

// The process_* metrics, computed when scraped.
class ProcessCollector : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    auto add = [&out](const char* name, const char* help, prometheus::MetricType type, double v) {
      prometheus::MetricFamily f;
      f.name = name;
      f.help = help;
      f.type = type;
      prometheus::ClientMetric m;
      if (type == prometheus::MetricType::Counter) {
        m.counter.value = v;
      } else {
        m.gauge.value = v;
      }
      f.metric.push_back(m);
      out.push_back(std::move(f));
    };
    const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
    const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
    std::ifstream statm("/proc/self/statm");
    double vm_pages = 0, rss_pages = 0;
    if (statm >> vm_pages >> rss_pages) {
      add("process_virtual_memory_bytes", "Virtual memory size in bytes.", prometheus::MetricType::Gauge,
          vm_pages * page);
      add("process_resident_memory_bytes", "Resident memory size in bytes.", prometheus::MetricType::Gauge,
          rss_pages * page);
    }
    // /proc/self/stat: fields after the command's closing parenthesis; utime and stime are
    // fields 14 and 15, starttime 22 (in clock ticks since boot).
    std::ifstream stat("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    if (auto close = text.rfind(')'); close != std::string::npos) {
      std::istringstream rest(text.substr(close + 2));
      std::vector<std::string> f;
      for (std::string s; rest >> s;) f.push_back(s);
      if (f.size() > 19) {  // f[0] is field 3
        add("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
            prometheus::MetricType::Counter, (std::stod(f[11]) + std::stod(f[12])) / ticks);
        double boot = 0;
        std::ifstream st("/proc/stat");
        for (std::string line; std::getline(st, line);) {
          if (line.rfind("btime ", 0) == 0) boot = std::stod(line.substr(6));
        }
        add("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
            prometheus::MetricType::Gauge, boot + std::stod(f[19]) / ticks);
      }
    }
    if (DIR* d = ::opendir("/proc/self/fd")) {
      double n = 0;
      while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
      ::closedir(d);
      add("process_open_fds", "Number of open file descriptors.", prometheus::MetricType::Gauge, n - 1);
    }
    return out;
  }
};

Result<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(const std::string& listen) {
  FM_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(listen, "[metrics] listen"));
  const std::string& host = hp.host;
  const std::string port = std::to_string(hp.port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0 || found == nullptr) {
    return Status::InvalidArgument("[metrics] listen \"" + listen + "\": " + ::gai_strerror(rc));
  }
  std::unique_ptr<MetricsExporter> e(new MetricsExporter());
  std::string error = "no address";
  for (addrinfo* a = found; a != nullptr && e->listen_fd_ < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      e->listen_fd_ = fd;
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      e->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      error = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (e->listen_fd_ < 0) {
    return Status::Unavailable("[metrics] listen: cannot serve metrics on " + listen + ": " + error);
  }
  e->registry_ = std::make_shared<prometheus::Registry>();
  e->process_ = std::make_shared<ProcessCollector>();
  e->url_ = "http://" + listen.substr(0, listen.rfind(':')) + ":" + std::to_string(e->port_) +
            "/metrics";
  e->thread_ = std::thread([p = e.get()] { p->Serve(); });
  return e;
}

MetricsExporter::~MetricsExporter() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

void MetricsExporter::Serve() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Answer(fd);
    ::close(fd);
  }
}

void MetricsExporter::Answer(int fd) const {
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.size() < 8192) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  const std::string line = request.substr(0, request.find("\r\n"));
  std::string status = "200 OK", body;
  if (line.rfind("GET ", 0) != 0 && line.rfind("HEAD ", 0) != 0) {
    status = "405 Method Not Allowed";
  } else {
    std::string target = line.substr(line.find(' ') + 1);
    target = target.substr(0, target.find(' '));
    target = target.substr(0, target.find('?'));
    if (target != "/metrics") {
      status = "404 Not Found";
    } else {
      std::vector<prometheus::MetricFamily> families = registry_->Collect();
      for (auto& f : process_->Collect()) families.push_back(std::move(f));
      body = prometheus::TextSerializer().Serialize(families);
    }
  }
  std::string response = "HTTP/1.1 " + status +
                         "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  if (line.rfind("HEAD ", 0) != 0) response += body;
  size_t sent = 0;
  while (sent < response.size()) {
    const ssize_t n = ::send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace fedmesh
