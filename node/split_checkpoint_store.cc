#include "node/split_checkpoint_store.h"

#include "core/hex.h"

namespace fedmesh {
namespace {

const std::string kPrefix = "split/ckpt/";

std::string RowsHex(const std::vector<uint32_t>& rows) {
  std::string bytes(rows.size() * 4, '\0');
  for (size_t i = 0; i < rows.size(); ++i)
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<char>(rows[i] >> (8 * b));
  return ToHex(bytes);
}

}  // namespace

Result<std::unique_ptr<NodeCheckpointStore>> NodeCheckpointStore::Open(NodeStore* store) {
  std::unique_ptr<NodeCheckpointStore> s(new NodeCheckpointStore(store));
  FM_ASSIGN_OR_RETURN(std::optional<NodeCheckpoint> cp, store->LoadCheckpoint());
  if (!cp) return s;
  auto bad = [](const std::string& why) { return Status::Corruption("node store, split checkpoints: " + why); };
  for (const auto& [key, value] : cp->attributes) {
    if (!key.starts_with(kPrefix) || !key.ends_with("/alignment")) continue;
    const std::string step_text = key.substr(kPrefix.size(), key.size() - kPrefix.size() - 10);
    vertical::PartyCheckpoint c;
    try {
      c.step = std::stoull(step_text);
    } catch (...) {
      return bad("step \"" + step_text + "\"");
    }
    const std::string at = kPrefix + step_text + "/";
    c.alignment = value;
    auto rows = cp->attributes.find(at + "rows");
    if (rows == cp->attributes.end()) return bad("step " + step_text + " has no rows");
    auto bytes = FromHex(rows->second);
    if (!bytes || bytes->size() % 4 != 0) return bad("step " + step_text + ": rows are not hex of 4-byte numbers");
    for (size_t i = 0; i < bytes->size(); i += 4) {
      uint32_t r = 0;
      for (int b = 3; b >= 0; --b) r = (r << 8) | static_cast<uint8_t>((*bytes)[i + b]);
      c.rows.push_back(r);
    }
    for (size_t k = 0;; ++k) {
      auto p = cp->tensors.find(at + "param/" + std::to_string(k));
      auto v = cp->tensors.find(at + "velocity/" + std::to_string(k));
      if (p == cp->tensors.end() || v == cp->tensors.end()) break;
      c.params.push_back(p->second);
      c.velocity.push_back(v->second);
    }
    if (c.params.empty()) return bad("step " + step_text + " has no parameters");
    s->kept_.kept[c.step] = std::move(c);
  }
  if (auto it = cp->attributes.find("split/committed"); it != cp->attributes.end()) {
    try {
      s->kept_.committed = std::stoull(it->second);
    } catch (...) {
      return bad("committed step \"" + it->second + "\"");
    }
  }
  return s;
}

Status NodeCheckpointStore::Write() {
  FM_ASSIGN_OR_RETURN(std::optional<NodeCheckpoint> old, store_->LoadCheckpoint());
  NodeCheckpoint cp = old ? *old : NodeCheckpoint{};
  for (auto it = cp.attributes.begin(); it != cp.attributes.end();)
    it = it->first.starts_with(kPrefix) ? cp.attributes.erase(it) : std::next(it);
  for (auto it = cp.tensors.begin(); it != cp.tensors.end();)
    it = it->first.starts_with(kPrefix) ? cp.tensors.erase(it) : std::next(it);
  for (const auto& [step, c] : kept_.kept) {
    const std::string at = kPrefix + std::to_string(step) + "/";
    cp.attributes[at + "alignment"] = c.alignment;
    cp.attributes[at + "rows"] = RowsHex(c.rows);
    for (size_t k = 0; k < c.params.size(); ++k) {
      cp.tensors[at + "param/" + std::to_string(k)] = c.params[k];
      cp.tensors[at + "velocity/" + std::to_string(k)] = c.velocity[k];
    }
  }
  if (kept_.committed) {
    cp.attributes["split/committed"] = std::to_string(*kept_.committed);
  } else {
    cp.attributes.erase("split/committed");
  }
  return store_->SaveCheckpoint(cp);
}

Status NodeCheckpointStore::Save(const vertical::PartyCheckpoint& cp) {
  FM_RETURN_IF_ERROR(kept_.Save(cp));
  return Write();
}

Status NodeCheckpointStore::Commit(uint64_t step) {
  FM_RETURN_IF_ERROR(kept_.Commit(step));
  return Write();
}

Result<std::optional<vertical::PartyCheckpoint>> NodeCheckpointStore::Load(std::optional<uint64_t> step) {
  return kept_.Load(step);
}

}  // namespace fedmesh
