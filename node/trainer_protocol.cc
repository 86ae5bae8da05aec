#include "node/trainer_protocol.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/json_line.h"

namespace fedmesh::trainer {

namespace {

using Json = nlohmann::json;
constexpr char kMagic[4] = {'F', 'M', 'T', 'R'};

Status Bad(const std::string& what) { return Status::InvalidArgument(what); }

// A JSON number that is a non-negative integer (5 or 5.0, not 5.5 or -1), as uint64.
std::optional<uint64_t> AsCount(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return std::nullopt;
    return static_cast<uint64_t>(i);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(d >= 0) || d > 9.007199254740992e15 || std::floor(d) != d) return std::nullopt;
    return static_cast<uint64_t>(d);
  }
  return std::nullopt;
}

bool MetricNameOk(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Printable ASCII only, cut to `limit` bytes: what a trainer says ends up in logs and in
// a wire::Reject text.
std::string Printable(std::string_view s, size_t limit) {
  std::string out;
  for (char c : s.substr(0, limit)) out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  return out;
}

Result<std::vector<TensorSpec>> ParseTensors(const Json& j) {
  if (!j.is_array()) return Bad("\"tensors\" must be a list");
  if (j.size() > kMaxTensors) {
    return Bad("\"tensors\" lists " + std::to_string(j.size()) + " tensors; at most " +
               std::to_string(kMaxTensors));
  }
  std::vector<TensorSpec> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& t = j[i];
    const std::string where = "tensors[" + std::to_string(i) + "]";
    if (!t.is_object()) return Bad(where + " must be an object");
    auto name = t.find("name");
    if (name == t.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      return Bad(where + " needs a non-empty string \"name\"");
    TensorSpec spec;
    spec.name = name->get<std::string>();
    if (spec.name.size() > 4096) return Bad(where + " has a name over 4096 bytes");
    const std::string named = where + " ('" + Printable(spec.name, 200) + "')";
    auto dtype = t.find("dtype");
    if (dtype != t.end() && (!dtype->is_string() || dtype->get<std::string>() != "float32"))
      return Bad(named + " has dtype " + dtype->dump() + "; float32 is the only dtype");
    auto shape = t.find("shape");
    if (shape == t.end() || !shape->is_array()) return Bad(named + " needs a \"shape\" list");
    if (shape->size() > kMaxTensorRank)
      return Bad(named + " has rank " + std::to_string(shape->size()) + "; at most " +
                 std::to_string(kMaxTensorRank));
    uint64_t elements = 1;
    for (const Json& d : *shape) {
      auto dim = AsCount(d);
      if (!dim || *dim > (uint64_t{1} << 40))
        return Bad(named + " has dimension " + d.dump() + "; dimensions are integers >= 0");
      spec.shape.push_back(static_cast<int64_t>(*dim));
      if (*dim != 0 && elements > (uint64_t{1} << 40) / *dim)
        return Bad(named + " has over 2^40 elements");
      elements *= *dim;
    }
    out.push_back(std::move(spec));
  }
  return out;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void AppendTensors(std::string& out, const std::vector<TensorSpec>& tensors) {
  out += "\"tensors\":[";
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i) out += ',';
    out += "{\"name\":";
    AppendJsonString(out, tensors[i].name);
    out += ",\"shape\":[";
    for (size_t d = 0; d < tensors[i].shape.size(); ++d) {
      if (d) out += ',';
      out += std::to_string(tensors[i].shape[d]);
    }
    out += "],\"dtype\":\"float32\"}";
  }
  out += ']';
}

}  // namespace

uint64_t TensorSpec::elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t PayloadBytes(const std::vector<TensorSpec>& tensors) {
  uint64_t total = 0;
  for (const TensorSpec& t : tensors) {
    const uint64_t e = t.elements();
    if (e > (std::numeric_limits<uint64_t>::max() - total) / 4) return std::numeric_limits<uint64_t>::max();
    total += 4 * e;
  }
  return total;
}

std::array<uint8_t, kPrefixBytes> EncodePrefix(uint32_t header_length, uint64_t payload_length) {
  std::array<uint8_t, kPrefixBytes> b{};
  std::memcpy(b.data(), kMagic, 4);
  for (int i = 0; i < 4; ++i) b[4 + i] = static_cast<uint8_t>(header_length >> (8 * i));
  for (int i = 0; i < 8; ++i) b[8 + i] = static_cast<uint8_t>(payload_length >> (8 * i));
  return b;
}

Result<FramePrefix> ParsePrefix(std::span<const uint8_t, kPrefixBytes> b, uint64_t max_payload) {
  if (std::memcmp(b.data(), kMagic, 4) != 0) {
    char hex[40];
    std::snprintf(hex, sizeof(hex), "%02x %02x %02x %02x", b[0], b[1], b[2], b[3]);
    return Bad(std::string("the trainer sent bytes that are not a fedmesh trainer message "
                           "(they start ") + hex + ", not \"FMTR\")");
  }
  FramePrefix p;
  for (int i = 0; i < 4; ++i) p.header_length |= static_cast<uint32_t>(b[4 + i]) << (8 * i);
  for (int i = 0; i < 8; ++i) p.payload_length |= static_cast<uint64_t>(b[8 + i]) << (8 * i);
  if (p.header_length < 2 || p.header_length > kMaxHeaderBytes) {
    return Bad("the trainer's message header is " + std::to_string(p.header_length) +
               " bytes; it must be 2.." + std::to_string(kMaxHeaderBytes));
  }
  if (p.payload_length > max_payload) {
    return Bad("the trainer's message carries " + std::to_string(p.payload_length) +
               " payload bytes; at most " + std::to_string(max_payload) + " are expected here");
  }
  return p;
}

std::string EncodeTaskHeader(const TaskRequest& r) {
  std::string out = "{\"type\":";
  AppendJsonString(out, r.kind);
  auto num = [&out](std::string_view key, const std::string& value) {
    out += ",\"";
    out += key;
    out += "\":";
    out += value;
  };
  auto real = [](double v) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%.17g", std::isfinite(v) ? v : 0.0);
    return std::string(buf);
  };
  num("task", std::to_string(r.task_id));
  num("round", std::to_string(r.round));
  out += ",\"node_id\":";
  AppendJsonString(out, r.node_id);
  num("epochs", std::to_string(r.epochs));
  num("steps", std::to_string(r.steps));
  num("lr", real(r.lr));
  num("batch", std::to_string(r.batch));
  num("momentum", real(r.momentum));
  num("prox_mu", real(r.prox_mu));
  num("seed", std::to_string(r.seed));
  out += ",\"loss\":";
  AppendJsonString(out, r.loss);
  num("deadline_unix_ms", std::to_string(r.deadline_unix_ms));
  out += ',';
  AppendTensors(out, r.tensors);
  out += '}';
  return out;
}

std::string EncodeShutdownHeader() { return "{\"type\":\"shutdown\"}"; }

Result<TrainerMessage> ParseTrainerHeader(std::string_view text) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("the trainer's message header is not valid JSON");
  if (!j.is_object()) return Bad("the trainer's message header is not a JSON object");
  auto type = j.find("type");
  if (type == j.end() || !type->is_string()) return Bad("the trainer's message has no \"type\"");
  const std::string t = type->get<std::string>();
  TrainerMessage m;
  auto count = [&](const char* key, bool required) -> Result<std::optional<uint64_t>> {
    auto it = j.find(key);
    if (it == j.end()) {
      if (required) return Bad("the trainer's " + t + " has no \"" + key + "\"");
      return std::optional<uint64_t>{};
    }
    auto v = AsCount(*it);
    if (!v) return Bad("the trainer's " + t + " has \"" + key + "\": " + it->dump(-1).substr(0, 100) +
                       "; it must be an integer >= 0");
    return std::optional<uint64_t>(*v);
  };
  if (t == "hello") {
    m.type = TrainerMessage::Type::kHello;
    FM_ASSIGN_OR_RETURN(auto protocol, count("protocol", true));
    if (*protocol != kProtocolVersion) {
      return Bad("the trainer speaks protocol " + std::to_string(*protocol) +
                 "; this node speaks protocol " + std::to_string(kProtocolVersion) +
                 " (upgrade the fedmesh Python package or the node)");
    }
    m.protocol = kProtocolVersion;
    FM_ASSIGN_OR_RETURN(m.hello_examples, count("num_examples", false));
    if (auto name = j.find("name"); name != j.end() && name->is_string())
      m.name = Printable(name->get<std::string>(), 64);
    return m;
  }
  FM_ASSIGN_OR_RETURN(auto task, count("task", true));
  m.task_id = *task;
  if (t == "error") {
    m.type = TrainerMessage::Type::kError;
    auto msg = j.find("message");
    m.message = msg != j.end() && msg->is_string() ? Printable(msg->get<std::string>(), kMaxMessageBytes)
                                                   : "(no message)";
    return m;
  }
  if (t != "result") return Bad("the trainer sent a message of unknown type \"" + Printable(t, 40) + "\"");
  m.type = TrainerMessage::Type::kResult;
  FM_ASSIGN_OR_RETURN(auto examples, count("num_examples", true));
  m.num_examples = *examples;
  if (auto metrics = j.find("metrics"); metrics != j.end() && !metrics->is_null()) {
    if (!metrics->is_object()) return Bad("the trainer's result has \"metrics\" that is not an object");
    if (metrics->size() > 256) return Bad("the trainer's result has over 256 metrics");
    for (const auto& [name, value] : metrics->items()) {
      if (!MetricNameOk(name))
        return Bad("the trainer's result has a metric named \"" + Printable(name, 80) +
                   "\"; names are 1..64 characters of [A-Za-z0-9_.-]");
      if (!value.is_number() || !std::isfinite(value.get<double>()))
        return Bad("the trainer's metric \"" + name + "\" is " + value.dump(-1).substr(0, 60) +
                   "; metrics are finite numbers");
      m.metrics[name] = value.get<double>();
    }
  }
  if (auto tensors = j.find("tensors"); tensors != j.end() && !tensors->is_null()) {
    FM_ASSIGN_OR_RETURN(m.tensors, ParseTensors(*tensors));
  }
  return m;
}

Result<std::vector<size_t>> MatchTensors(const std::vector<TensorSpec>& expected,
                                         const std::vector<TensorSpec>& got) {
  std::unordered_map<std::string_view, size_t> index;
  for (size_t i = 0; i < expected.size(); ++i) index.emplace(expected[i].name, i);
  std::vector<size_t> out;
  out.reserve(got.size());
  std::vector<bool> seen(expected.size(), false);
  for (const TensorSpec& t : got) {
    auto it = index.find(t.name);
    if (it == index.end())
      return Bad("the trainer sent tensor '" + Printable(t.name, 200) +
                 "', which the federation's model does not have");
    if (seen[it->second]) return Bad("the trainer sent tensor '" + t.name + "' twice");
    seen[it->second] = true;
    if (t.shape != expected[it->second].shape)
      return Bad("the trainer sent tensor '" + t.name + "' with shape " + ShapeText(t.shape) +
                 "; the federation's model has " + ShapeText(expected[it->second].shape));
    out.push_back(it->second);
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (!seen[i])
      return Bad("the trainer's answer lacks tensor '" + expected[i].name + "' (shape " +
                 ShapeText(expected[i].shape) + ")");
  }
  return out;
}

}  // namespace fedmesh::trainer
