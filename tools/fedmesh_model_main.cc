// fedmesh-model: inspects ONNX models and exports trained ones out of fedmesh stores.
//   fedmesh-model inspect FILE.onnx
//   fedmesh-model export --db STORE.db [--round N | --best METRIC] --out FILE.onnx|FILE.npz
// export opens the store read-only: it never creates, migrates or changes one.
// Exit codes: 0 success, 2 bad input (a file that does not read, a --db that is not a
// fedmesh store, a round that does not exist), 1 anything else.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/backend.h"
#include "core/builtin_graph.h"
#include "core/exit_code.h"
#include "core/graph/graph_model.h"
#include "core/model.h"
#include "core/hex.h"
#include "core/model_export.h"
#include "core/npz.h"
#include "core/onnx/onnx_reader.h"
#include "storage/aggregator_store.h"
#include "storage/node_store.h"
#include "storage/sqlite/database.h"

namespace {

using fedmesh::kExitBadInput;

int Fail(const fedmesh::Status& s) {
  std::fprintf(stderr, "fedmesh-model: %s\n", s.message().c_str());
  return fedmesh::ExitCodeFor(s);
}

std::string Dims(const fedmesh::graph::Dims& d) { return fedmesh::graph::DimsToString(d); }

int Inspect(const std::string& path) {
  auto g = fedmesh::onnx::ReadOnnxFile(path);
  if (!g.ok()) return Fail(g.status());
  std::map<std::string, int> ops;
  for (const auto& n : g->nodes) ++ops[n.op_type];
  const int64_t opset = g->opset;
  const std::string name = g->name;
  auto backend = fedmesh::MakeCpuBackend(1);
  auto m = fedmesh::Model::CreateFromGraph(path, backend.get(), std::move(*g));
  if (!m.ok()) return Fail(m.status().WithContext(path));
  const fedmesh::graph::GraphModel& gm = *(*m)->graph_model();
  std::printf("model       %s (graph '%s', opset %lld)\n", path.c_str(), name.c_str(),
              static_cast<long long>(opset));
  std::printf("graph hash  %s\n", gm.hash().c_str());
  for (const auto& in : gm.graph().inputs)
    std::printf("input       %s %s %s\n", in.name.c_str(), fedmesh::graph::DTypeName(in.dtype),
                Dims(in.dims).c_str());
  for (const auto& out : gm.graph().outputs)
    std::printf("output      %s %s\n", out.name.c_str(), Dims(out.dims).c_str());
  std::printf("parameters  %zu trainable in %zu tensors, %zu state values in %zu tensors\n",
              gm.num_trainable(), gm.param_slots().size(), gm.num_state(),
              gm.state_slots().size());
  std::printf("ops        ");
  for (const auto& [op, count] : ops) std::printf(" %s x%d", op.c_str(), count);
  std::printf("\n");
  std::printf("flat vector order (offset, name, dims):\n");
  for (const auto* slots : {&gm.param_slots(), &gm.state_slots()})
    for (const auto& s : *slots)
      std::printf("  %10zu  %s %s%s\n", s.offset, s.name.c_str(), Dims(s.dims).c_str(),
                  slots == &gm.state_slots() ? " (state)" : "");
  return 0;
}

// The value of "name": NUMBER in a flat JSON object, or nullopt (absent or null).
std::optional<double> JsonValue(const std::string& json, const std::string& name) {
  const std::string key = "\"" + name + "\":";
  const size_t at = json.find(key);
  if (at == std::string::npos) return std::nullopt;
  const char* start = json.c_str() + at + key.size();
  char* end = nullptr;
  const double v = std::strtod(start, &end);
  if (end == start || !std::isfinite(v)) return std::nullopt;
  return v;
}

// Metrics where smaller is better; every other one (accuracy, auc, f1, r2, ...) is larger.
bool LowerIsBetter(const std::string& metric) {
  return metric == "loss" || metric == "log_loss" || metric == "mse" || metric == "rmse" ||
         metric == "mae";
}

// The round whose global model scored best on `metric` in federated evaluation (the
// example-weighted "*" rows of site_eval); the earliest of equals.
fedmesh::Result<uint64_t> BestRound(fedmesh::AggregatorStore& store, const std::string& db,
                                    const std::string& metric) {
  FM_ASSIGN_OR_RETURN(auto rows, store.SiteEvalHistory("*"));
  std::optional<uint64_t> best;
  double best_value = 0.0;
  for (const auto& r : rows) {
    const std::optional<double> v =
        metric == "loss" ? (std::isfinite(r.loss) ? std::optional<double>(r.loss) : std::nullopt)
                         : JsonValue(r.metrics_json, metric);
    if (!v) continue;
    if (!best || (LowerIsBetter(metric) ? *v < best_value : *v > best_value)) {
      best = r.round;
      best_value = *v;
    }
  }
  if (!best) {
    return fedmesh::Status::NotFound(db + " holds no federated evaluation with metric '" + metric +
                                     "' ([eval] federated = true records them)");
  }
  std::fprintf(stderr, "fedmesh-model: best %s %.6g at round %llu\n", metric.c_str(), best_value,
               static_cast<unsigned long long>(*best));
  return *best;
}

// A read-only connection cannot checkpoint, so it leaves the -wal and -shm files it made
// beside a WAL store, owned by whoever ran export (which can lock the aggregator's user out
// of its own store). SQLite removes them when the last connection that may write closes:
// one more, which writes nothing (the WAL is empty), does so on destruction; they are left
// alone when they were there before (another process has the store open).
class SidecarTidy {
 public:
  explicit SidecarTidy(const std::string& db) : db_(db), had_(Present()) {}
  ~SidecarTidy() {
    if (had_ || !Present()) return;
    fedmesh::DatabaseOptions o;
    o.create_if_missing = false;
    (void)fedmesh::Database::Open(db_, o);  // closed at once
  }
  SidecarTidy(const SidecarTidy&) = delete;
  SidecarTidy& operator=(const SidecarTidy&) = delete;

 private:
  bool Present() const {
    std::error_code ec;
    return std::filesystem::exists(db_ + "-wal", ec) || std::filesystem::exists(db_ + "-shm", ec);
  }
  std::string db_;
  bool had_;
};

// The model of `round` (its committed version; the latest when round is empty; the best
// by federated evaluation with `best`) from an aggregator store, or the checkpointed model
// of a node store.
int Export(const std::string& db, std::optional<uint64_t> round, const std::string& best, const std::string& part,
           const std::string& out) {
  std::string graph_bytes;
  std::optional<fedmesh::ModelSpec> builtin;  // the store's built-in model, when it says
  std::vector<float> params;
  // Read-only: export never creates, migrates or writes a store.
  std::error_code ec;
  if (!std::filesystem::exists(db, ec)) return Fail(fedmesh::Status::NotFound("--db " + db + " does not exist"));
  const SidecarTidy tidy(db);  // destroyed after the store (declared in the blocks below)
  auto agg = fedmesh::AggregatorStore::OpenReadOnly(db);
  std::unique_ptr<fedmesh::NodeStore> node_store;
  if (!agg.ok()) {
    auto node = fedmesh::NodeStore::OpenReadOnly(db);
    if (!node.ok()) {
      // A store of one kind that could not be read says why; anything else is no store.
      if (node.status().message().find("is a fedmesh aggregator store") != std::string::npos) return Fail(agg.status());
      if (agg.status().message().find("is a fedmesh node store") != std::string::npos) return Fail(node.status());
      return Fail(agg.status().WithContext("--db " + db + " is not a fedmesh store"));
    }
    node_store = std::move(node).value();
  }
  if (agg.ok()) {
    if (!part.empty()) return Fail(fedmesh::Status::InvalidArgument("--part is for a split job's node store, " + db + " is an aggregator's"));
    auto graph = (*agg)->ModelGraph();
    if (!graph.ok()) return Fail(graph.status());
    if (*graph && (*graph)->sha256 == fedmesh::kBuiltinModelGraph) {
      auto spec = fedmesh::SpecFromText((*graph)->onnx);
      if (!spec.ok()) return Fail(spec.status().WithContext(db));
      builtin = *spec;
    } else if (*graph) {
      graph_bytes = (*graph)->onnx;
    }
    uint64_t version = 0;
    if (!best.empty()) {
      if (round) return Fail(fedmesh::Status::InvalidArgument("give --round or --best, not both"));
      auto r = BestRound(**agg, db, best);
      if (!r.ok()) return Fail(r.status());
      round = *r;
    }
    if (round) {
      auto metrics = (*agg)->Metrics();
      if (!metrics.ok()) return Fail(metrics.status());
      bool found = false;
      for (const auto& m : *metrics)
        if (m.round == *round) version = m.model_version, found = true;
      if (!found && *round != 0)
        return Fail(fedmesh::Status::OutOfRange(db + ": round " + std::to_string(*round) +
                                                " has not closed in this store"));
      auto p = (*agg)->LoadModel(version);
      if (!p.ok()) return Fail(p.status());
      params = std::move(*p);
    } else {
      auto latest = (*agg)->LatestModel();
      if (!latest.ok()) return Fail(latest.status());
      if (!*latest) return Fail(fedmesh::Status::NotFound(db + " holds no model yet"));
      version = (*latest)->version;
      params = std::move((*latest)->params);
    }
    std::fprintf(stderr, "fedmesh-model: aggregator store %s, model version %llu\n", db.c_str(),
                 static_cast<unsigned long long>(version));
  } else {
    auto* node = &node_store;
    if (round || !best.empty())
      return Fail(fedmesh::Status::InvalidArgument("--round and --best are for aggregator stores"));
    auto cp = (*node)->LoadCheckpoint();
    if (!cp.ok()) return Fail(cp.status());
    if (!*cp) return Fail(fedmesh::Status::NotFound(db + " holds no checkpoint yet"));
    params = std::move((*cp)->model);
    const auto role = (*cp)->attributes.find("split/role");
    if (part == "top") {
      // A split job's label party keeps its top model beside its bottom one.
      auto top = (*cp)->tensors.find("split/top");
      auto graph = (*cp)->attributes.find("split/top_graph_hex");
      if (top == (*cp)->tensors.end() || graph == (*cp)->attributes.end())
        return Fail(fedmesh::Status::InvalidArgument(
            db + " holds no top model: --part top is for the label party of a split job" +
            (role != (*cp)->attributes.end() ? " (this store is a " + role->second + " party's)" : "")));
      params = std::move(top->second);
      (*cp)->attributes["model/graph_hex"] = graph->second;
    } else if (part != "bottom" && !part.empty()) {
      return Fail(fedmesh::Status::InvalidArgument("--part is bottom or top, not " + part));
    }
    if (auto spec = (*cp)->attributes.find("model/spec"); spec != (*cp)->attributes.end()) {
      auto parsed = fedmesh::SpecFromText(spec->second);  // a built-in model ([train] mode = "allreduce")
      if (!parsed.ok()) return Fail(parsed.status().WithContext(db));
      builtin = *parsed;
    }
    auto it = (*cp)->attributes.find("model/graph_hex");
    if (it != (*cp)->attributes.end()) {
      auto bytes = fedmesh::FromHex(it->second);
      if (!bytes) return Fail(fedmesh::Status::Corruption(db + ": the checkpoint's model graph is not hex"));
      graph_bytes = std::move(*bytes);
    }
  }
  auto backend = fedmesh::MakeCpuBackend(1);
  if (builtin) {
    auto g = fedmesh::BuiltinModelGraph(*builtin, params);
    if (!g.ok()) return Fail(g.status().WithContext(db));
    fedmesh::Status s = fedmesh::SaveGraph(*g, out);
    if (!s.ok()) return Fail(s);
  } else if (graph_bytes.empty()) {
    // A store from before model specs were kept: its flat vector is all there is.
    if (out.size() < 4 || out.compare(out.size() - 4, 4, ".npz") != 0)
      return Fail(fedmesh::Status::InvalidArgument(
          db + " holds a built-in model, which exports as .npz only"));
    fedmesh::NpzArray a;
    a.name = "params";
    a.f = std::move(params);
    a.dims = {static_cast<int64_t>(a.f.size())};
    fedmesh::Status s = fedmesh::WriteNpzFile(out, {a});
    if (!s.ok()) return Fail(s);
  } else {
    fedmesh::onnx::ReaderLimits limits;
    limits.absent_weights_as_zeros = true;
    auto g = fedmesh::onnx::ParseOnnx(graph_bytes, limits);
    if (!g.ok()) return Fail(g.status().WithContext(db + ": the stored model graph"));
    auto m = fedmesh::Model::CreateFromGraph("export", backend.get(), std::move(*g));
    if (!m.ok()) return Fail(m.status().WithContext(db + ": the stored model graph"));
    fedmesh::Status s = (*m)->SetParams(params);
    if (!s.ok()) return Fail(s.WithContext(db));
    s = fedmesh::SaveModel(**m, out);
    if (!s.ok()) return Fail(s);
  }
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedmesh-model: inspect ONNX models and export trained models from fedmesh stores"};
  app.set_version_flag("--version", "fedmesh-model 0.1.0");
  app.require_subcommand(1);
  std::string inspect_path, db, out, best, part;
  std::optional<uint64_t> round;
  auto* inspect = app.add_subcommand("inspect", "Print ops, parameters, shapes and the graph hash");
  inspect->add_option("file", inspect_path, "The .onnx file")->required();
  auto* exp = app.add_subcommand("export", "Write a round's global model as ONNX or .npz");
  exp->add_option("--db", db, "An aggregator store (or a node store: its last model)")->required();
  exp->add_option("--round", round, "The round whose model to export (default: the latest)");
  exp->add_option("--best", best,
                  "Export the round whose model scored best in federated evaluation on this "
                  "metric (accuracy, auc, macro_f1, r2, ...: higher; loss, log_loss, mse, "
                  "rmse, mae: lower)");
  exp->add_option("--out", out, "FILE.onnx or FILE.npz")->required();
  exp->add_option("--part", part,
                  "A split job's node store: bottom (default: this party's part) or top (the "
                  "label party's model over the bottom outputs)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitBadInput;
  }
  if (*inspect) return Inspect(inspect_path);
  return Export(db, round, best, part, out);
}
