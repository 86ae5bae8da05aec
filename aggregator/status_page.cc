#include "aggregator/status_page.h"

#include <fstream>

#include <httplib.h>
#include <sodium.h>

#include "aggregator/status_html.h"
#include "aggregator/stored_model_export.h"
#include "core/host_port.h"

namespace fedmesh {
namespace {

bool SameToken(const std::string& given, const std::string& want) {
  return given.size() == want.size() && sodium_memcmp(given.data(), want.data(), want.size()) == 0;
}

// The request's token: ?token=, else Authorization: Bearer.
std::string TokenOf(const httplib::Request& req) {
  if (req.has_param("token")) return req.get_param_value("token");
  const std::string auth = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  return auth.rfind(bearer, 0) == 0 ? auth.substr(bearer.size()) : std::string();
}

void Secure(httplib::Response& res) {
  res.set_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-store");
}

}  // namespace

Result<std::string> ReadStatusToken(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("[status_page] token_file " + path + ": cannot be read");
  std::string line;
  std::getline(in, line);
  const auto b = line.find_first_not_of(" \t\r");
  const auto e = line.find_last_not_of(" \t\r");
  line = b == std::string::npos ? "" : line.substr(b, e - b + 1);
  if (line.size() < 16) {
    return Status::InvalidArgument("[status_page] token_file " + path +
                                   ": the token must be at least 16 characters on the first line");
  }
  return line;
}

StatusPage::~StatusPage() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

Result<std::unique_ptr<StatusPage>> StatusPage::Start(StatusPageOptions options) {
  if (options.board == nullptr) return Status::InvalidArgument("StatusPage needs a StatusBoard");
  FM_ASSIGN_OR_RETURN(HostPort hp, ParseHostPort(options.listen, "[status_page] listen"));
  std::unique_ptr<StatusPage> page(new StatusPage());
  page->options_ = std::move(options);
  page->server_ = std::make_unique<httplib::Server>();
  httplib::Server& svr = *page->server_;
  svr.new_task_queue = [] { return new httplib::ThreadPool(2); };
  svr.set_payload_max_length(8192);
  svr.set_read_timeout(5, 0);
  svr.set_write_timeout(30, 0);
  svr.set_keep_alive_max_count(10);
  const StatusPageOptions* o = &page->options_;
  // Every route checks the token first; 401 says how to give it, never what it is.
  svr.set_pre_routing_handler([o](const httplib::Request& req, httplib::Response& res) {
    Secure(res);
    if (o->token.empty() || SameToken(TokenOf(req), o->token)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer realm=\"fedmesh\"");
    res.set_content("fedmesh status page: a token is required (?token=... or Authorization: Bearer ...)\n",
                    "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.Get("/", [o](const httplib::Request& req, httplib::Response& res) {
    StatusHtmlOptions html;
    if (!o->token.empty()) html.link_query = "?token=" + httplib::detail::encode_query_param(TokenOf(req));
    res.set_content(StatusHtml(*o->board->Get(), html), "text/html; charset=utf-8");
  });
  svr.Get("/api/status", [o](const httplib::Request&, httplib::Response& res) {
    res.set_content(StatusToJson(*o->board->Get()).dump(1), "application/json");
  });
  svr.Get(R"(/model/(latest|\d{1,19})\.onnx)", [o](const httplib::Request& req, httplib::Response& res) {
    std::optional<uint64_t> version;
    if (req.matches[1] != "latest") version = std::stoull(req.matches[1]);
    auto model = ExportStoredModel(o->db_path, version);
    if (!model.ok()) {
      res.status = model.status().code() == StatusCode::kNotFound ? 404 : 500;
      res.set_content(model.status().message() + "\n", "text/plain");
      return;
    }
    res.set_header("Content-Disposition",
                   "attachment; filename=\"model-v" + std::to_string(model->version) + ".onnx\"");
    res.set_content(std::move(model->onnx), "application/octet-stream");
  });
  svr.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) res.set_content("not found\n", "text/plain");
  });
  const int port = hp.port == 0 ? svr.bind_to_any_port(hp.host) : (svr.bind_to_port(hp.host, hp.port) ? hp.port : -1);
  if (port <= 0) {
    return Status::Unavailable("[status_page] listen: cannot serve on " + page->options_.listen);
  }
  page->port_ = port;
  const std::string shown = hp.host.find(':') != std::string::npos ? "[" + hp.host + "]" : hp.host;
  page->url_ = "http://" + shown + ":" + std::to_string(port) + "/";
  page->thread_ = std::thread([p = page.get()] { p->server_->listen_after_bind(); });
  return page;
}

}  // namespace fedmesh
