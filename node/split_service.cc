#include "node/split_service.h"

#include <algorithm>

#include "config/config_loader.h"
#include "collective/group_members.h"
#include "core/data/csv_table.h"
#include "core/data/data_source.h"
#include "core/data/impute.h"
#include "core/hex.h"
#include "core/json_line.h"
#include "core/onnx/onnx_reader.h"
#include "core/graph/inference_graph.h"
#include "core/onnx/onnx_writer.h"
#include "crypto/key_files.h"
#include "storage/node_store.h"
#include "vertical/assemble_model.h"

namespace fedmesh {
namespace {


Result<std::unique_ptr<vertical::SplitPart>> LoadPart(const std::string& path, const char* key,
                                                      const vertical::SplitPartOptions& o) {
  const std::string what = std::string("[split] ") + key + " = " + path;
  auto g = onnx::ReadOnnxFile(path);
  if (!g.ok()) return g.status().WithContext(what);
  return vertical::SplitPart::Create(std::move(*g), o, what);
}

}  // namespace

SplitService::~SplitService() = default;

Result<std::unique_ptr<SplitService>> SplitService::Create(const NodeConfig& config,
                                                           std::function<void(const std::string&)> log) {
  std::unique_ptr<SplitService> s(new SplitService());
  s->config_ = config;
  s->log_ = std::move(log);
  const SplitConfig& k = config.split;
  FM_ASSIGN_OR_RETURN(Identity identity, FromKey(ReadIdentity(config.key_path), config.config_path, "node", "key"));
  if (identity.name() != config.node_id) {
    return Status::InvalidArgument("key file '" + config.key_path + "' belongs to site '" + identity.name() +
                                   "' but [node] id is '" + config.node_id + "'");
  }
  s->identity_ = std::make_unique<Identity>(std::move(identity));
  FM_ASSIGN_OR_RETURN(collective::ResolvedGroup group,
                      collective::ResolveGroup(k.peers, k.allow_dir, *s->identity_, "[split] peers"));
  for (const collective::RingMember& m : group.members) s->members_.push_back(m.identity);

  // The table: ids from the id column, features from every other column (or [data]
  // features), the label party's label.
  const DataSourceSpec& spec = config.training.data;
  const std::string path = spec.train.substr(4);
  FM_ASSIGN_OR_RETURN(CsvTable table, ReadCsvTable(path));
  auto id_values = CsvColumn(table, k.id_column, /*unique=*/true);
  if (!id_values.ok()) return id_values.status().WithContext("[split] id_column");
  std::vector<std::string> ids = std::move(*id_values);
  CsvOptions co = CsvOptionsOf(spec);
  co.unlabeled = k.role == "feature";
  if (co.features.empty()) {
    for (const std::string& n : table.names)
      if (n != k.id_column && n != spec.label_column) co.features.push_back(n);
  }
  FM_ASSIGN_OR_RETURN(Dataset data, ReadCsv(path, co));
  if (data.size() != ids.size()) {
    return Status::Corruption(path + ": " + std::to_string(data.size()) + " rows of features for " +
                              std::to_string(ids.size()) + " ids");
  }
  if (HasMissing(data)) {
    // The party's own means: its columns are its alone, so there is no federated mean to use.
    auto means = ColumnMeans(data);
    if (!means.ok()) return means.status().WithContext(path);
    FM_RETURN_IF_ERROR(ImputeMissing(data, *means).status());
  }

  vertical::SplitPartOptions po;
  po.lr = config.training.trainer.sgd.lr;
  po.momentum = config.training.trainer.sgd.momentum;
  FM_ASSIGN_OR_RETURN(std::unique_ptr<vertical::SplitPart> bottom, LoadPart(k.bottom, "bottom", po));
  if (bottom->in_cols() != static_cast<int64_t>(data.sample_size())) {
    std::string cols;
    for (const std::string& n : data.feature_names) cols += (cols.empty() ? "" : ", ") + n;
    return Status::InvalidArgument("[split] bottom = " + k.bottom + " takes " + std::to_string(bottom->in_cols()) +
                                   " features per row; " + path + " gives " + std::to_string(data.sample_size()) +
                                   " (" + cols + ")");
  }
  FM_ASSIGN_OR_RETURN(s->store_, NodeStore::Open(config.db_path));
  {
    FM_ASSIGN_OR_RETURN(std::optional<NodeCheckpoint> old, s->store_->LoadCheckpoint());
    if (old && old->attributes.count("split/finished")) {
      return Status::FailedPrecondition(config.db_path + " holds a finished split job ([node] db): export its parts "
                                        "with fedmesh-model, and start another job with a new [node] db");
    }
  }
  FM_ASSIGN_OR_RETURN(s->checkpoints_, NodeCheckpointStore::Open(s->store_.get()));
  collective::ZmqRingTransportOptions to;
  to.max_chunk_bytes = uint64_t{1} << 30;
  to.linger_ms = 10000;  // the last message (done, or an error) must reach the others
  FM_ASSIGN_OR_RETURN(to.security, collective::ParseRingSecurity(k.security));
  to.log = s->log_;
  FM_ASSIGN_OR_RETURN(s->transport_,
                      collective::ZmqRingTransport::Create(*s->identity_, group.members, k.listen, to));
  if (s->log_) {
    s->log_(k.role + " party " + std::to_string(group.my_rank) + " of " + std::to_string(group.members.size()) +
            " on " + s->transport_->endpoint() + " (" + collective::RingSecurityLabel(s->transport_->security()) + ")");
  }
  if (k.role == "label") {
    s->label_ = std::make_unique<vertical::LabelJob>();
    vertical::LabelJob& j = *s->label_;
    j.ids = std::move(ids);
    j.data = std::move(data);
    j.bottom = std::move(bottom);
    vertical::SplitPartOptions top_o = po;
    top_o.input_gradients = true;
    FM_ASSIGN_OR_RETURN(j.top, LoadPart(k.top, "top", top_o));
    if (k.combine == "sum" && j.top->in_cols() != j.bottom->out_cols()) {
      return Status::InvalidArgument("[split] combine = sum adds bottom outputs of one width: the top model (" + k.top +
                                     ") takes " + std::to_string(j.top->in_cols()) + " inputs, the own bottom model gives " +
                                     std::to_string(j.bottom->out_cols()));
    }
    j.party.loss = config.training.trainer.loss;
    j.party.noise = k.noise;
    j.party.wire = vertical::CutWireOfCompression(k.compression).value();
    j.party.combine = vertical::CutCombineOf(k.combine).value();
    for (int r = 1; r < static_cast<int>(group.members.size()); ++r) j.feature_ranks.push_back(r);
    j.collect_parts = !k.assemble.empty();
  } else {
    s->feature_ = std::make_unique<vertical::FeatureJob>();
    vertical::FeatureJob& j = *s->feature_;
    j.ids = std::move(ids);
    j.data = std::move(data);
    j.bottom = std::move(bottom);
    j.party.noise = k.noise;
    j.party.wire = vertical::CutWireOfCompression(k.compression).value();
    j.label_rank = 0;
    j.share_part = k.share_part;
  }
  return s;
}

Result<vertical::SplitJobReport> SplitService::Run(const std::atomic<bool>* stop) {
  vertical::SplitJobOptions o;
  o.epochs = config_.training.epochs;
  o.batch = config_.training.trainer.batch_size;
  o.microbatches = static_cast<uint32_t>(config_.split.microbatches);
  o.staleness = static_cast<uint32_t>(config_.split.staleness);
  o.test_fraction = config_.training.data.test_fraction;
  o.seed = config_.training.data.split_seed;
  o.timeout_ms = static_cast<int>(config_.split.timeout_ms);
  o.log = log_;
  o.stop = stop;
  o.checkpoints = checkpoints_.get();
  o.checkpoint_every = static_cast<uint64_t>(config_.split.checkpoint_every);
  o.rejoin_timeout_ms = static_cast<int>(config_.split.rejoin_timeout_ms);
  o.signer = identity_.get();
  o.federation = config_.federation_id;
  o.members = members_;
  Status metrics_error;
  if (!config_.training.metrics_path.empty()) {
    o.metrics = [&](const std::string& line) {
      std::string with_site = line;
      with_site.insert(1, "\"site\":\"" + config_.node_id + "\",");
      FILE* f = std::fopen(config_.training.metrics_path.c_str(), "a");
      if (f == nullptr) {
        metrics_error = Status::IOError("cannot append to " + config_.training.metrics_path);
        return;
      }
      std::fprintf(f, "%s\n", with_site.c_str());
      std::fclose(f);
    };
  }
  Result<vertical::SplitJobReport> r = Status::Internal("no job");
  if (label_) {
    std::unique_ptr<vertical::LabelParty> party;
    r = vertical::RunLabelJob(*transport_, std::move(*label_), o, &party);
    if (r.ok()) FM_RETURN_IF_ERROR(SaveParts(&party->bottom(), &party->top()));
    if (r.ok() && !config_.split.assemble.empty()) FM_RETURN_IF_ERROR(Assemble(*party, r->parts));
  } else {
    std::unique_ptr<vertical::FeatureParty> party;
    r = vertical::RunFeatureJob(*transport_, std::move(*feature_), o, &party);
    if (r.ok()) FM_RETURN_IF_ERROR(SaveParts(&party->bottom(), nullptr));
  }
  // A failed job has told the others why; a dead party will not take the rest.
  if (!r.ok()) transport_->SetLinger(1000);
  FM_RETURN_IF_ERROR(metrics_error);
  return r;
}

Status SplitService::Assemble(vertical::LabelParty& party, const std::vector<std::string>& parts) {
  std::string declined;
  for (size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].empty()) {
      const std::string& m = config_.split.peers[k + 1];
      declined += (declined.empty() ? "" : ", ") + m.substr(0, m.find('@'));
    }
  }
  if (!declined.empty()) {
    log_("not assembling the whole model: " + declined +
         " did not consent ([split] share_part); each party exports its own part");
    return Status::OK();
  }
  std::vector<graph::Graph> bottoms = {graph::InferenceGraph(party.bottom().model())};
  for (size_t k = 0; k < parts.size(); ++k) {
    auto g = onnx::ParseOnnx(parts[k]);
    if (!g.ok()) return g.status().WithContext("the part " + config_.split.peers[k + 1] + " sent");
    bottoms.push_back(std::move(*g));
  }
  FM_ASSIGN_OR_RETURN(graph::Graph whole, vertical::AssembleSplitModel(bottoms, graph::InferenceGraph(party.top().model()),
                                                                             vertical::CutCombineOf(config_.split.combine).value()));
  FM_RETURN_IF_ERROR(onnx::WriteOnnxFile(whole, config_.split.assemble));
  log_("wrote the whole model to " + config_.split.assemble + " (input: " + std::to_string(whole.inputs[0].dims[1]) +
       " columns, this party's first, then each feature party's in [split] peers order)");
  return Status::OK();
}

Status SplitService::SaveParts(vertical::SplitPart* bottom, vertical::SplitPart* top) {
  // The checkpoints stay beside the model (the record of how the job ended).
  FM_ASSIGN_OR_RETURN(std::optional<NodeCheckpoint> old, store_->LoadCheckpoint());
  NodeCheckpoint cp = old ? *old : NodeCheckpoint{};
  ++cp.model_version;
  cp.attributes["split/finished"] = "1";
  const graph::GraphModel& b = bottom->model();
  cp.model.assign(b.params(), b.params() + b.num_flat());
  FM_ASSIGN_OR_RETURN(std::string onnx, onnx::SerializeArchitecture(b.graph()));
  cp.attributes["model/graph_hex"] = ToHex(onnx);
  cp.attributes["model/graph_sha256"] = b.hash();
  cp.attributes["split/role"] = config_.split.role;
  if (top != nullptr) {
    const graph::GraphModel& t = top->model();
    cp.tensors["split/top"].assign(t.params(), t.params() + t.num_flat());
    FM_ASSIGN_OR_RETURN(std::string top_onnx, onnx::SerializeArchitecture(t.graph()));
    cp.attributes["split/top_graph_hex"] = ToHex(top_onnx);
  }
  return store_->SaveCheckpoint(cp);
}

}  // namespace fedmesh
