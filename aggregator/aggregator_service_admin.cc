// AggregatorService's operations side: the admin channel (fedmesh-admin), the status page
// and the view both show (docs/operations.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "aggregator/aggregator_service.h"
#include "aggregator/stored_model_export.h"
#include "crypto/key_files.h"

namespace fedmesh {
namespace {

double WallNowS() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Commands every admin key may send, and those only the admin role may.
const std::set<std::string>& ReadCommands() {
  static const std::set<std::string> k = {"status", "sites", "rounds", "log", "export"};
  return k;
}
const std::set<std::string>& ChangeCommands() {
  static const std::set<std::string> k = {"pause", "resume", "abort", "kick"};
  return k;
}

nlohmann::json Refusal(const std::string& why) { return {{"ok", false}, {"error", why}}; }

}  // namespace

Status AggregatorService::CheckSiteKeysApart(const std::map<std::string, std::string>& sites) const {
  for (const auto& [key, what] : operator_keys_) {
    if (auto site = sites.find(key); site != sites.end()) {
      return Status::InvalidArgument(what + " is also the key of site " + site->second + " in " + config_.allow_dir +
                                     "; admin and observer keys must be kept apart from site keys");
    }
  }
  return Status::OK();
}

Status AggregatorService::StartOperations(const Identity& identity) {
  FM_ASSIGN_OR_RETURN(std::optional<std::string> paused, store_->Control("paused"));
  if (paused) {
    (void)engine_->Pause();
    control_message_ = *paused;
    spdlog::warn("the federation is paused ({}): no round opens until fedmesh-admin resume", *paused);
  }
  FM_ASSIGN_OR_RETURN(std::vector<RoundMetrics> closed, store_->Metrics());
  for (RoundMetrics& m : closed) rounds_.push_back({std::move(m), std::nan("")});

  if (!config_.admin_listen.empty()) {
    auto admins_read = ReadAllowlist(config_.admin_dir);
    if (!admins_read.ok()) return admins_read.status().WithContext("[admin] admins");
    std::vector<PublicIdentity> admins = std::move(admins_read).value();
    std::vector<PublicIdentity> observers;
    if (std::filesystem::exists(config_.observer_dir)) {
      auto o = ReadAllowlist(config_.observer_dir);
      if (!o.ok()) return o.status().WithContext("[admin] observers");
      observers = std::move(o).value();
    }
    for (const PublicIdentity& a : admins) operator_keys_[a.curve_public_z85()] = "[admin] admins key " + a.name;
    for (const PublicIdentity& o : observers) {
      operator_keys_[o.curve_public_z85()] = "[admin] observers key " + o.name;
    }
    FM_RETURN_IF_ERROR(CheckSiteKeysApart(name_of_key_));
    FM_ASSIGN_OR_RETURN(admin_, AdminServer::Create(identity, admins, observers));
    FM_ASSIGN_OR_RETURN(admin_endpoint_, admin_->Bind(config_.admin_listen));
    spdlog::info("admin channel on {} ({} admin key(s), {} observer key(s))", admin_endpoint_,
                 admins.size(), observers.size());
  }
  PublishStatus(true);
  if (!config_.status_listen.empty()) {
    StatusPageOptions o;
    o.listen = config_.status_listen;
    o.db_path = config_.db_path;
    o.board = &board_;
    if (!config_.status_token_file.empty()) {
      FM_ASSIGN_OR_RETURN(o.token, ReadStatusToken(config_.status_token_file));
    }
    FM_ASSIGN_OR_RETURN(status_page_, StatusPage::Start(std::move(o)));
    spdlog::info("status page on {}{}", status_page_->url(),
                 config_.status_token_file.empty() ? "" : " (token required)");
  }
  return Status::OK();
}

FederationStatus AggregatorService::BuildStatus() const {
  FederationStatus s;
  const RoundEngine& e = *engine_;
  s.federation_id = config_.federation_id;
  s.aggregator_id = config_.rounds.aggregator_id;
  s.round = e.round();
  s.total_rounds = config_.rounds.total_rounds;
  s.rounds_completed = e.rounds_completed();
  s.model_version = e.model_version();
  s.attempt = e.attempt();
  s.message = control_message_;
  if (finished_) {
    const std::string aborted = "aborted: ";
    s.state = !finish_status_.ok()                          ? "failed"
              : control_message_.rfind(aborted, 0) == 0     ? "aborted"
                                                            : "finished";
    if (s.state == "aborted") s.message = control_message_.substr(aborted.size());
  } else if (e.paused()) {
    s.state = "paused";
  } else if (e.phase() == RoundEngine::Phase::kRoundOpen) {
    s.state = "round open";
  } else {
    s.state = "waiting for sites";
  }
  const std::vector<std::string> answered = e.answered();
  if (e.phase() == RoundEngine::Phase::kRoundOpen) {
    s.selected = e.selected().size();
    s.answered = answered.size();
    s.deadline_in_s = std::max(0.0, e.deadline_s() - env_->NowSeconds());
  }
  s.updated_unix = WallNowS();
  std::set<std::string> names;
  for (const PublicIdentity& p : allowlist_) names.insert(p.name);
  for (const auto& [name, a] : activity_) names.insert(name);
  for (const std::string& name : names) {
    SiteStatus site;
    site.name = name;
    site.enrolled = std::any_of(allowlist_.begin(), allowlist_.end(),
                                [&](const PublicIdentity& p) { return p.name == name; }) &&
                    !kicked_.contains(name);
    site.connected = e.connected(name);
    site.selected = std::binary_search(e.selected().begin(), e.selected().end(), name) &&
                    e.phase() == RoundEngine::Phase::kRoundOpen;
    site.answered = site.selected && std::find(answered.begin(), answered.end(), name) != answered.end();
    if (auto it = activity_.find(name); it != activity_.end()) {
      site.last_seen_unix = it->second.last_seen_unix;
      site.last_round = it->second.last_round;
      site.last_examples = it->second.last_examples;
      site.updates = it->second.updates;
    }
    s.sites.push_back(std::move(site));
  }
  s.rounds = rounds_;
  return s;
}

void AggregatorService::PublishStatus(bool force) {
  const double now = env_->NowSeconds();
  if (!force && now < next_publish_s_) return;
  next_publish_s_ = now + 0.2;
  board_.Publish(BuildStatus());
}

Status AggregatorService::PollAdmin() {
  if (!admin_) return Status::OK();
  for (int i = 0; i < 8; ++i) {
    FM_ASSIGN_OR_RETURN(std::optional<AdminRequest> req, admin_->Poll(0));
    if (!req) break;
    FM_RETURN_IF_ERROR(HandleAdmin(*req));
  }
  return Status::OK();
}

Status AggregatorService::Kick(const std::string& site) {
  auto entry = std::find_if(allowlist_.begin(), allowlist_.end(),
                            [&](const PublicIdentity& p) { return p.name == site; });
  if (entry == allowlist_.end()) return Status::NotFound("no enrolled site is named " + site);
  kicked_.insert(site);
  std::vector<PublicIdentity> admitted;
  for (const PublicIdentity& p : allowlist_) {
    if (!kicked_.contains(p.name)) admitted.push_back(p);
  }
  server_->Reload(admitted);
  const bool was_connected = server_->Disconnect(entry->curve_public_z85());
  key_of_name_.erase(site);
  spdlog::warn("site {} kicked: {}; its key is refused until the allowlist is reloaded (SIGHUP) "
               "or the aggregator restarts",
               site, was_connected ? "its connection is closed" : "it was not connected");
  return Handle(engine_->OnRevoke(site));
}

Status AggregatorService::HandleAdmin(const AdminRequest& req) {
  const std::string role = AdminRoleName(req.role);
  nlohmann::json reply;
  std::string payload;
  std::string result = "ok";
  if (!ReadCommands().contains(req.command) && !ChangeCommands().contains(req.command)) {
    reply = Refusal("unknown command \"" + req.command +
                    "\"; one of status, sites, rounds, log, export, pause, resume, abort, kick");
  } else if (ChangeCommands().contains(req.command) && req.role != AdminRole::kAdmin) {
    reply = Refusal("the " + role + " key " + req.who + " may only read (status, sites, rounds, "
                    "log, export); " + req.command + " needs an admin key");
  } else if (finished_ && ChangeCommands().contains(req.command)) {
    reply = Refusal("the federation has finished; nothing to " + req.command);
  } else if (req.command == "status" || req.command == "sites" || req.command == "rounds") {
    reply = {{"ok", true}, {"result", StatusToJson(BuildStatus())}};
  } else if (req.command == "log") {
    FM_ASSIGN_OR_RETURN(std::vector<AdminActionRecord> log, store_->AdminActions(100));
    nlohmann::json rows = nlohmann::json::array();
    for (const AdminActionRecord& a : log) {
      rows.push_back({{"time", a.time}, {"admin", a.admin}, {"role", a.role}, {"action", a.action},
                      {"argument", a.argument}, {"result", a.result}});
    }
    reply = {{"ok", true}, {"result", std::move(rows)}};
  } else if (req.command == "export") {
    std::optional<uint64_t> version;
    if (!req.argument.empty()) {
      if (req.argument.find_first_not_of("0123456789") != std::string::npos || req.argument.size() > 19) {
        reply = Refusal("export takes a model version (a number), got \"" + req.argument + "\"");
      } else {
        version = std::stoull(req.argument);
      }
    }
    if (reply.is_null()) {
      auto model = ExportStoredModel(*store_, version);
      if (!model.ok()) {
        reply = Refusal(model.status().message());
      } else {
        reply = {{"ok", true}, {"result", {{"model_version", model->version}, {"bytes", model->onnx.size()}}}};
        payload = std::move(model->onnx);
      }
    }
  } else if (req.command == "pause") {
    if (engine_->paused()) {
      reply = Refusal("already paused (" + control_message_ + ")");
    } else {
      const std::string by = "by " + req.who;
      FM_RETURN_IF_ERROR(store_->SetControl("paused", by));
      FM_RETURN_IF_ERROR(Handle(engine_->Pause()));
      control_message_ = by;
      const bool open = engine_->phase() == RoundEngine::Phase::kRoundOpen;
      reply = {{"ok", true},
               {"result", open ? "paused: round " + std::to_string(engine_->round()) +
                                     " runs to its close, then no round opens until resume"
                               : "paused: no round opens until resume"}};
    }
  } else if (req.command == "resume") {
    if (!engine_->paused()) {
      reply = Refusal("not paused");
    } else {
      FM_RETURN_IF_ERROR(store_->SetControl("paused", ""));
      control_message_.clear();
      FM_RETURN_IF_ERROR(Handle(engine_->Resume()));
      reply = {{"ok", true}, {"result", "resumed at round " + std::to_string(engine_->round())}};
    }
  } else if (req.command == "abort") {
    const std::string by = "by " + req.who + (req.argument.empty() ? "" : ": " + req.argument);
    FM_RETURN_IF_ERROR(store_->SetControl("aborted", by));
    control_message_ = "aborted: " + by;
    reply = {{"ok", true},
             {"result", "aborted after " + std::to_string(engine_->rounds_completed()) +
                            " round(s); the aggregator exits"}};
    // Record before the engine's Finished makes the service stop polling.
    FM_RETURN_IF_ERROR(store_->RecordAdminAction({WallNowS(), req.who, role, req.command, req.argument, result}));
    spdlog::warn("admin {} ({}): abort{}", req.who, role, req.argument.empty() ? "" : " " + req.argument);
    FM_RETURN_IF_ERROR(admin_->Reply(req, reply));
    return Handle(engine_->Abort(by));
  } else if (req.command == "kick") {
    if (req.argument.empty()) {
      reply = Refusal("kick needs a site name");
    } else if (Status k = Kick(req.argument); !k.ok()) {
      if (k.code() != StatusCode::kNotFound) return k;
      reply = Refusal(k.message());
    } else {
      reply = {{"ok", true}, {"result", "kicked " + req.argument}};
    }
  }
  if (!reply.value("ok", false)) result = reply.value("error", "refused");
  FM_RETURN_IF_ERROR(
      store_->RecordAdminAction({WallNowS(), req.who, role, req.command, req.argument, result}));
  if (result == "ok") {
    spdlog::info("admin {} ({}): {}{}", req.who, role, req.command,
                 req.argument.empty() ? "" : " " + req.argument);
  } else {
    spdlog::warn("admin {} ({}): {}{} refused: {}", req.who, role, req.command,
                 req.argument.empty() ? "" : " " + req.argument, result);
  }
  PublishStatus(true);
  return admin_->Reply(req, reply, payload);
}

}  // namespace fedmesh
