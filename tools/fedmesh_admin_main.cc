// fedmesh-admin: controls and inspects a running aggregator over its admin channel
// (docs/operations.md):
//   fedmesh-admin --kit KIT status|sites|rounds|log [--json]
//   fedmesh-admin --kit KIT pause|resume | abort [REASON] | kick SITE
//   fedmesh-admin --kit KIT export [--version V] --out FILE.onnx
// Exit codes: 0 done, 1 the aggregator refused (a role that may not, an unknown key) or did
// not answer, 2 a bad kit or bad arguments.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>

#include "config/admin_kit_config.h"
#include "crypto/key_files.h"
#include "transport/zmq/admin_client.h"

namespace {

std::string Num(const nlohmann::json& v, const char* format = "%.4f") {
  if (!v.is_number()) return "-";
  char buf[48];
  std::snprintf(buf, sizeof buf, format, v.get<double>());
  return buf;
}

std::string Clock(double unix_s) {
  if (unix_s <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_s);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::gmtime(&t));
  return buf;
}

void PrintStatus(const nlohmann::json& s) {
  std::printf("federation %s (aggregator %s): %s%s%s\n", s.value("federation", "").c_str(),
              s.value("aggregator", "").c_str(), s.value("state", "").c_str(),
              s.value("message", "").empty() ? "" : ", ",
              s.value("message", "").c_str());
  std::printf("round %llu of %llu, %llu completed, model version %llu\n",
              s.value("round", 0ULL), s.value("total_rounds", 0ULL),
              s.value("rounds_completed", 0ULL), s.value("model_version", 0ULL));
  if (s.value("state", "") == "round open") {
    std::printf("updates in: %llu of %llu, deadline in %s s\n", s.value("answered", 0ULL),
                s.value("selected", 0ULL), Num(s["deadline_in_s"], "%.0f").c_str());
  }
  int online = 0;
  for (const auto& site : s["sites"]) online += site.value("connected", false) ? 1 : 0;
  std::printf("sites: %d of %zu online\n", online, s["sites"].size());
  if (!s["rounds"].empty()) {
    const auto& r = s["rounds"].back();
    std::printf("last round %llu: test accuracy %s, test loss %s, %llu of %llu updates\n",
                r.value("round", 0ULL), Num(r["test_accuracy"]).c_str(), Num(r["test_loss"]).c_str(),
                r.value("received", 0ULL), r.value("selected", 0ULL));
  }
}

void PrintSites(const nlohmann::json& s) {
  std::printf("%-24s %-8s %-9s %-10s %-20s %s\n", "site", "status", "round", "last_round",
              "last_seen_utc", "updates");
  for (const auto& site : s["sites"]) {
    const char* status = !site.value("enrolled", true) ? "revoked"
                         : site.value("connected", false) ? "online" : "offline";
    const char* in_round = site.value("answered", false)   ? "answered"
                           : site.value("selected", false) ? "training" : "-";
    std::printf("%-24s %-8s %-9s %-10llu %-20s %llu\n", site.value("name", "").c_str(), status,
                in_round, site.value("last_round", 0ULL),
                Clock(site["last_seen_unix"].is_number() ? site["last_seen_unix"].get<double>() : 0).c_str(),
                site.value("updates", 0ULL));
  }
}

void PrintRounds(const nlohmann::json& s) {
  std::printf("%-6s %-8s %-9s %-9s %-9s %-9s %s\n", "round", "version", "accuracy", "loss",
              "received", "selected", "wall_s");
  for (const auto& r : s["rounds"]) {
    std::printf("%-6llu %-8llu %-9s %-9s %-9llu %-9llu %s\n", r.value("round", 0ULL),
                r.value("model_version", 0ULL), Num(r["test_accuracy"]).c_str(),
                Num(r["test_loss"]).c_str(), r.value("received", 0ULL), r.value("selected", 0ULL),
                Num(r["wall_s"], "%.2f").c_str());
  }
}

void PrintLog(const nlohmann::json& rows) {
  for (const auto& a : rows) {
    std::printf("%s  %-16s %-8s %-8s %-16s %s\n", Clock(a.value("time", 0.0)).c_str(),
                a.value("admin", "").c_str(), a.value("role", "").c_str(),
                a.value("action", "").c_str(), a.value("argument", "").c_str(),
                a.value("result", "").c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fedmesh-admin: inspect and control a running aggregator over its admin channel "
      "(CurveZMQ, admin keys only).\nExit codes: 0 done, 1 refused or no answer, 2 bad kit or "
      "arguments."};
  std::string kit;
  bool json = false;
  app.add_option("--kit", kit, "The admin kit folder (holds admin.toml)")->required();
  app.add_flag("--json", json, "Print the aggregator's answer as JSON");
  app.require_subcommand(1);
  app.add_subcommand("status", "The federation, the current round and its progress");
  app.add_subcommand("sites", "Every enrolled site: online, in this round, last contribution");
  app.add_subcommand("rounds", "Every closed round's figures");
  app.add_subcommand("log", "The latest admin actions and who made them");
  app.add_subcommand("pause", "Open no new round (the open one runs to its close); admin only");
  app.add_subcommand("resume", "Open rounds again; admin only");
  std::string reason, site, out;
  auto* abort_cmd = app.add_subcommand("abort", "End the federation now; admin only");
  abort_cmd->add_option("reason", reason, "Why (kept in the log)");
  auto* kick = app.add_subcommand("kick", "Disconnect a site and refuse it until the allowlist is "
                                          "reloaded; admin only");
  kick->add_option("site", site, "The site's name")->required();
  auto* exp = app.add_subcommand("export", "Download a global model as ONNX");
  std::string version;
  exp->add_option("--version", version, "The model version (default: the latest)");
  exp->add_option("--out", out, "Where to write it (.onnx)")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  const std::string command = app.get_subcommands().front()->get_name();
  const std::string argument = command == "kick" ? site : command == "abort" ? reason
                               : command == "export" ? version : "";

  auto config = fedmesh::LoadAdminKitConfig(kit + "/admin.toml");
  if (!config.ok()) {
    std::fprintf(stderr, "fedmesh-admin: %s\n", config.status().message().c_str());
    return 2;
  }
  auto me = fedmesh::ReadIdentity(config->key_path);
  if (!me.ok()) {
    std::fprintf(stderr, "fedmesh-admin: %s: [admin] key: %s\n", config->config_path.c_str(),
                 me.status().message().c_str());
    return 2;
  }
  auto server = fedmesh::ReadPublicIdentity(config->server_key);
  if (!server.ok()) {
    std::fprintf(stderr, "fedmesh-admin: %s: [admin] server_key: %s\n", config->config_path.c_str(),
                 server.status().message().c_str());
    return 2;
  }
  fedmesh::AdminCallOptions options;
  options.timeout_ms = config->timeout_ms;
  auto reply = fedmesh::AdminCall(*me, *server, config->endpoint, command, argument, options);
  if (!reply.ok()) {
    std::fprintf(stderr, "fedmesh-admin: %s\n", reply.status().message().c_str());
    return 1;
  }
  const nlohmann::json& r = reply->reply;
  if (!r.value("ok", false)) {
    std::fprintf(stderr, "fedmesh-admin: %s refused: %s\n", command.c_str(),
                 r.value("error", "(no reason given)").c_str());
    return 1;
  }
  const nlohmann::json& result = r["result"];
  if (command == "export") {
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f.write(reply->payload.data(), static_cast<std::streamsize>(reply->payload.size()));
    if (!f.good()) {
      std::fprintf(stderr, "fedmesh-admin: cannot write %s\n", out.c_str());
      return 1;
    }
    std::printf("wrote %s (model version %llu, %zu bytes)\n", out.c_str(),
                result.value("model_version", 0ULL), reply->payload.size());
    return 0;
  }
  if (json) {
    std::printf("%s\n", result.dump(1).c_str());
  } else if (command == "status") {
    PrintStatus(result);
  } else if (command == "sites") {
    PrintSites(result);
  } else if (command == "rounds") {
    PrintRounds(result);
  } else if (command == "log") {
    PrintLog(result);
  } else {
    std::printf("%s\n", result.is_string() ? result.get<std::string>().c_str() : result.dump().c_str());
  }
  return 0;
}
