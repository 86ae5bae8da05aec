// Test helpers for Prometheus endpoints: an HTTP GET over a plain socket, a strict parse
// of the text exposition format, and a cross-check with prometheus_client's own parser
// (Debian python3-prometheus-client) when it is installed.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>

namespace fedmesh::testing_util {

// The body of GET http://127.0.0.1:PORT/PATH, or nullopt when the request failed or the
// status is not 200.
inline std::optional<std::string> HttpGet(int port, const std::string& path = "/metrics") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, req.data(), req.size(), 0) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return std::nullopt;
  }
  std::string resp;
  char buf[8192];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) resp.append(buf, static_cast<size_t>(n));
  ::close(fd);
  const size_t body = resp.find("\r\n\r\n");
  if (resp.rfind("HTTP/1.1 200", 0) != 0 && resp.rfind("HTTP/1.0 200", 0) != 0) return std::nullopt;
  if (body == std::string::npos) return std::nullopt;
  return resp.substr(body + 4);
}

// Every sample of a text-format body: "name{labels}" -> value. Fails (nullopt, `error`
// set) on a line that is neither a comment nor a well-formed sample.
inline std::optional<std::map<std::string, double>> ParseExposition(const std::string& text, std::string* error) {
  static const std::regex kSample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([-+0-9.eE]+|NaN|\+Inf|-Inf)( [0-9]+)?$)");
  static const std::regex kComment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .*$)");
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    std::smatch m;
    if (line[0] == '#') {
      if (!std::regex_match(line, kComment)) {
        *error = "bad comment line: " + line;
        return std::nullopt;
      }
      continue;
    }
    if (!std::regex_match(line, m, kSample)) {
      *error = "bad sample line: " + line;
      return std::nullopt;
    }
    out[m[1].str() + m[2].str()] = std::strtod(m[3].str().c_str(), nullptr);
  }
  return out;
}

// prometheus_client's parser over `text`: "" when it parses, else its error (or "skip"
// when the module is not installed).
inline std::string ParseWithPrometheusClient(const std::string& text, const std::string& dir) {
  if (std::system("/usr/bin/python3 -c 'import prometheus_client' >/dev/null 2>&1") != 0) return "skip";
  // Named by process: callers may pass a directory other test processes share (TempDir()).
  const std::string tag = std::to_string(::getpid());
  const std::string in = dir + "/scrape." + tag + ".txt", out = dir + "/parse." + tag + ".txt";
  std::ofstream(in) << text;
  const std::string cmd =
      "/usr/bin/python3 -c \"import sys; from prometheus_client.parser import text_string_to_metric_families as p; "
      "fams = list(p(open(sys.argv[1]).read())); print(len(fams))\" " + in + " >" + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream r(out);
  std::string s((std::istreambuf_iterator<char>(r)), std::istreambuf_iterator<char>());
  std::remove(in.c_str());
  std::remove(out.c_str());
  return rc == 0 ? "" : s;
}

}  // namespace fedmesh::testing_util
