// StatusPage: the aggregator's read-only status page ([status_page] listen; docs/operations.md)
// on Debian's cpp-httplib, on its own threads. GET / is the page (aggregator/status_html.h),
// /api/status the same view as JSON (aggregator/federation_status.h), /model/latest.onnx and
// /model/VERSION.onnx the stored global models (aggregator/stored_model_export.h). Nothing
// else is served and nothing is fetched from elsewhere. With a token every request must
// carry it (?token=TOKEN or Authorization: Bearer TOKEN; compared in constant time) or gets
// 401; the config refuses a non-loopback address without one. Requests are capped (8 KiB,
// 5 s to read) and served by 2 threads.
// Thread-safety: Start and the destructor from one thread; the server reads the StatusBoard.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "aggregator/federation_status.h"
#include "core/status.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace fedmesh {

struct StatusPageOptions {
  std::string listen;    // HOST:PORT; port 0 = any free one
  std::string token;     // required on every request when not empty
  std::string db_path;   // the aggregator's store, for model downloads
  const StatusBoard* board = nullptr;  // REQUIRED; outlives the page
};

class StatusPage {
 public:
  // Binds and starts serving. InvalidArgument for a bad address or no board; Unavailable
  // when the address cannot be bound.
  static Result<std::unique_ptr<StatusPage>> Start(StatusPageOptions options);
  ~StatusPage();
  StatusPage(const StatusPage&) = delete;
  StatusPage& operator=(const StatusPage&) = delete;

  int port() const { return port_; }
  // "http://HOST:PORT/" with the port bound.
  const std::string& url() const { return url_; }

 private:
  StatusPage() = default;
  StatusPageOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::string url_;
};

// Reads a token file: its first line, trimmed. InvalidArgument when empty or shorter than
// 16 characters (a guessable token is no protection), naming the file.
Result<std::string> ReadStatusToken(const std::string& path);

}  // namespace fedmesh
