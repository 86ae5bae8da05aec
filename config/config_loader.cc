#include "config/config_loader.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <toml++/toml.h>

#include "core/check.h"
#include "core/host_port.h"

namespace fedmesh {

namespace fs = std::filesystem;

namespace {

std::string FullName(std::string_view section, std::string_view key) {
  return std::string(section) + "." + std::string(key);
}

// "0.5", "1.0", "1e-05": a float as TOML would spell it, so messages match the docs.
std::string ShortestFloat(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, ec == std::errc() ? end : buf);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string SQuote(std::string_view s) { return "'" + std::string(s) + "'"; }

// " (did you mean [train]?)" or " (known sections: [node], [data])".
std::string SuggestSection(const ConfigSchema& schema, std::string_view section) {
  const std::vector<std::string> sections = schema.Sections();
  const std::vector<std::string_view> names(sections.begin(), sections.end());
  if (std::string_view best = ClosestName(section, names); !best.empty()) {
    return " (did you mean [" + std::string(best) + "]?)";
  }
  std::string all;
  for (const std::string& s : sections) all += (all.empty() ? "" : ", ") + ("[" + s + "]");
  return " (known sections: " + all + ")";
}

// Suggests the closest key of `section`, else the same key in another section, else lists
// the section's keys.
std::string SuggestKey(const ConfigSchema& schema, std::string_view section, std::string_view key) {
  std::vector<std::string_view> names;
  std::string all;
  for (const ConfigKey& k : schema.keys) {
    if (k.section != section) continue;
    names.push_back(k.key);
    all += (all.empty() ? "" : ", ") + k.key;
  }
  if (std::string_view best = ClosestName(key, names); !best.empty()) return " (did you mean " + SQuote(best) + "?)";
  for (const ConfigKey& k : schema.keys) {
    if (k.key == key) return " (did you mean " + k.Name() + "? it belongs in [" + k.section + "])";
  }
  return " (known keys in [" + std::string(section) + "]: " + all + ")";
}

std::string Location(const std::string& path, const toml::source_region& src) {
  return path + ":" + std::to_string(src.begin.line) + ":" + std::to_string(src.begin.column);
}

std::string TomlTypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::array: return "array";
    case toml::node_type::table: return "table";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    default: return "nothing";
  }
}

std::string Describe(const toml::node& node) {
  std::string out = TomlTypeName(node);
  if (auto s = node.value_exact<std::string>()) return out + " \"" + *s + "\"";
  if (node.is_value()) {
    std::ostringstream s;
    node.visit([&](const auto& v) { s << v; });
    out += " " + s.str();
  }
  return out;
}

// The message after "<where>: [section] key: " for a wrong type.
std::string Expected(const ConfigKey& k, const std::string& got) {
  return "expected " + std::string(ConfigTypeName(k.type)) + ", got " + got;
}

Result<ConfigValue> FromToml(const toml::node& node, const ConfigKey& k) {
  switch (k.type) {
    case ConfigType::kString:
      if (auto v = node.value_exact<std::string>()) return ConfigValue(*v);
      break;
    case ConfigType::kInt:
      if (auto v = node.value_exact<int64_t>()) return ConfigValue(*v);
      break;
    case ConfigType::kFloat:
      if (auto v = node.value_exact<double>()) return ConfigValue(*v);
      if (auto v = node.value_exact<int64_t>()) return ConfigValue(static_cast<double>(*v));
      break;
    case ConfigType::kBool:
      if (auto v = node.value_exact<bool>()) return ConfigValue(*v);
      break;
    case ConfigType::kStringList:
      if (const toml::array* arr = node.as_array()) {
        std::vector<std::string> out;
        for (size_t i = 0; i < arr->size(); ++i) {
          auto v = (*arr)[i].value_exact<std::string>();
          if (!v) {
            return Status::InvalidArgument(Expected(k, "an array whose element " + std::to_string(i) +
                                                           " is a " + Describe((*arr)[i])));
          }
          out.push_back(*v);
        }
        return ConfigValue(std::move(out));
      }
      break;
    case ConfigType::kFloatList:
      if (const toml::array* arr = node.as_array()) {
        std::vector<double> out;
        for (size_t i = 0; i < arr->size(); ++i) {
          if (auto v = (*arr)[i].value_exact<double>()) {
            out.push_back(*v);
          } else if (auto n = (*arr)[i].value_exact<int64_t>()) {
            out.push_back(static_cast<double>(*n));
          } else {
            return Status::InvalidArgument(Expected(k, "an array whose element " + std::to_string(i) +
                                                           " is a " + Describe((*arr)[i])));
          }
        }
        return ConfigValue(std::move(out));
      }
      break;
  }
  return Status::InvalidArgument(Expected(k, Describe(node)));
}

Result<ConfigValue> FromText(const std::string& text, const ConfigKey& k) {
  const char* b = text.data();
  const char* e = text.data() + text.size();
  switch (k.type) {
    case ConfigType::kString:
      return ConfigValue(text);
    case ConfigType::kInt: {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(b, e, v);
      if (ec == std::errc() && p == e && !text.empty()) return ConfigValue(v);
      break;
    }
    case ConfigType::kFloat: {
      double v = 0;
      auto [p, ec] = std::from_chars(b, e, v);
      if (ec == std::errc() && p == e && !text.empty()) return ConfigValue(v);
      break;
    }
    case ConfigType::kBool:
      if (text == "true") return ConfigValue(true);
      if (text == "false") return ConfigValue(false);
      return Status::InvalidArgument("expected boolean (true or false), got " + SQuote(text));
    case ConfigType::kStringList: {
      std::vector<std::string> out;
      if (text.empty()) return ConfigValue(out);
      std::string item;
      std::istringstream in(text);
      while (std::getline(in, item, ',')) {
        size_t first = item.find_first_not_of(" \t");
        size_t last = item.find_last_not_of(" \t");
        out.push_back(first == std::string::npos ? "" : item.substr(first, last - first + 1));
      }
      if (text.back() == ',') out.push_back("");
      return ConfigValue(std::move(out));
    }
    case ConfigType::kFloatList: {
      std::vector<double> out;
      std::string item;
      std::istringstream in(text);
      while (!text.empty() && std::getline(in, item, ',')) {
        size_t first = item.find_first_not_of(" \t");
        size_t last = item.find_last_not_of(" \t");
        const std::string t = first == std::string::npos ? "" : item.substr(first, last - first + 1);
        double v = 0;
        auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
        if (ec != std::errc() || p != t.data() + t.size() || t.empty())
          return Status::InvalidArgument(Expected(k, SQuote(text)));
        out.push_back(v);
      }
      return ConfigValue(std::move(out));
    }
  }
  return Status::InvalidArgument(Expected(k, SQuote(text)));
}

Status CheckValue(const ConfigKey& k, const ConfigValue& value) {
  if (k.type == ConfigType::kFloatList) {
    for (double v : std::get<std::vector<double>>(value)) {
      if (!std::isfinite(v)) return Status::InvalidArgument("every element must be a finite number");
      bool low = k.min && (k.min_exclusive ? v <= *k.min : v < *k.min);
      bool high = k.max && (k.max_exclusive ? v >= *k.max : v > *k.max);
      if (low || high)
        return Status::InvalidArgument("every element must be " + k.RangeText() + ", got " +
                                       ShortestFloat(v));
    }
    return Status::OK();
  }
  if (k.type == ConfigType::kInt || k.type == ConfigType::kFloat) {
    double v = k.type == ConfigType::kInt ? static_cast<double>(std::get<int64_t>(value))
                                          : std::get<double>(value);
    std::string shown = k.type == ConfigType::kInt ? std::to_string(std::get<int64_t>(value))
                                                   : ShortestFloat(v);
    if (!std::isfinite(v)) return Status::InvalidArgument("must be a finite number, got " + shown);
    bool low = k.min && (k.min_exclusive ? v <= *k.min : v < *k.min);
    bool high = k.max && (k.max_exclusive ? v >= *k.max : v > *k.max);
    if (low || high) return Status::InvalidArgument("must be " + k.RangeText() + ", got " + shown);
  }
  if (k.type == ConfigType::kString && !k.choices.empty()) {
    const std::string& s = std::get<std::string>(value);
    bool found = false;
    std::string all;
    for (const std::string& c : k.choices) {
      found |= c == s;
      all += (all.empty() ? "" : ", ") + ("\"" + c + "\"");
    }
    if (!found) return Status::InvalidArgument("must be one of " + all + "; got \"" + s + "\"");
  }
  return Status::OK();
}

std::string ResolvePath(const fs::path& base, const std::string& p) {
  if (p.empty() || fs::path(p).is_absolute()) return p;
  return (base / p).lexically_normal().string();
}

std::string Resolve(const fs::path& base, const std::string& value, PathKind kind) {
  if (value.empty() || kind == PathKind::kNone) return value;
  if (kind != PathKind::kDataSource) return ResolvePath(base, value);
  // "csv:PATH", "npz:PATH", "images:DIR", "npy:X,Y"; other names are not paths.
  for (const char* prefix : {"csv:", "npz:", "images:"}) {
    if (value.starts_with(prefix)) {
      const size_t n = std::string_view(prefix).size();
      return prefix + ResolvePath(base, value.substr(n));
    }
  }
  if (value.starts_with("npy:")) {
    const std::string paths = value.substr(4);
    const size_t comma = paths.find(',');
    if (comma == std::string::npos) return "npy:" + ResolvePath(base, paths);
    return "npy:" + ResolvePath(base, paths.substr(0, comma)) + "," +
           ResolvePath(base, paths.substr(comma + 1));
  }
  return value;
}

}  // namespace

// Fills a ConfigValues; a class so it may touch the private entries.
class ConfigLoaderImpl {
 public:
  static Result<ConfigValues> Load(const ConfigSchema& schema, const std::string& path,
                                   const std::vector<std::string>& overrides);
};

Result<ConfigValues> ConfigLoaderImpl::Load(const ConfigSchema& schema, const std::string& path,
                                            const std::vector<std::string>& overrides) {
  // Overrides are parsed first: a malformed flag is reported even when the file is bad too.
  struct Override {
    const ConfigKey* key;
    ConfigValue value;
    std::string flag;
  };
  std::vector<Override> parsed;
  for (const std::string& o : overrides) {
    const std::string flag = "--set " + o;
    size_t eq = o.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(flag + ": expected section.key=value (no '=' found), e.g. --set train.lr=0.05");
    }
    std::string lhs = o.substr(0, eq);
    std::string text = o.substr(eq + 1);
    size_t dot = lhs.find('.');
    if (dot == std::string::npos || dot == 0) {
      std::string hint = "; write section.key=value";
      for (const ConfigKey& k : schema.keys) {
        if (k.key == lhs) {
          hint = "; did you mean --set " + k.section + "." + k.key + "=" + text + "?";
          break;
        }
      }
      return Status::InvalidArgument(flag + ": the key " + SQuote(lhs) + " needs its section" + hint);
    }
    std::string section = lhs.substr(0, dot);
    std::string key = lhs.substr(dot + 1);
    if (!schema.HasSection(section)) {
      return Status::InvalidArgument(flag + ": unknown section [" + section + "]" +
                                     SuggestSection(schema, section));
    }
    const ConfigKey* k = schema.Find(section, key);
    if (!k) {
      return Status::InvalidArgument(flag + ": unknown key " + SQuote(key) + " in [" + section + "]" +
                                     SuggestKey(schema, section, key));
    }
    auto v = FromText(text, *k);
    if (!v.ok()) return v.status().WithContext(flag + ": " + k->Name());
    FM_RETURN_IF_ERROR(CheckValue(*k, *v).WithContext(flag + ": " + k->Name()));
    parsed.push_back({k, std::move(*v), flag});
  }

  ConfigValues out;
  out.config_path_ = path;
  for (const ConfigKey& k : schema.keys) {
    out.entries_[FullName(k.section, k.key)] = {k.default_value, k.type, "default", false};
  }

  if (!path.empty()) {
    std::error_code ec;
    if (!fs::exists(path, ec)) {
      return Status::NotFound("config file '" + path + "' does not exist");
    }
    if (fs::is_directory(path, ec)) {
      return Status::InvalidArgument("config file '" + path + "' is a directory, not a TOML file");
    }
    if (!std::ifstream(path)) {
      return Status::IOError("config file '" + path + "' cannot be read; check its permissions");
    }
    toml::table root;
    try {
      root = toml::parse_file(path);
    } catch (const toml::parse_error& e) {
      return Status::InvalidArgument(Location(path, e.source()) + ": TOML syntax error: " +
                                     std::string(e.description()));
    } catch (const std::exception& e) {
      return Status::IOError("config file '" + path + "': " + e.what());
    }
    for (auto&& [skey, snode] : root) {
      const std::string section(skey.str());
      const toml::table* table = snode.as_table();
      if (!table) {
        std::string hint = "; every key belongs to a section such as [" + schema.Sections().front() + "]";
        for (const ConfigKey& k : schema.keys) {
          if (k.key == section) {
            hint = "; did you mean to put it under [" + k.section + "]?";
            break;
          }
        }
        return Status::InvalidArgument(Location(path, skey.source()) + ": key " + SQuote(section) +
                                       " is outside any section" + hint);
      }
      if (!schema.HasSection(section)) {
        return Status::InvalidArgument(Location(path, skey.source()) + ": unknown section [" + section +
                                       "]" + SuggestSection(schema, section));
      }
      for (auto&& [kkey, knode] : *table) {
        const std::string key(kkey.str());
        const ConfigKey* k = schema.Find(section, key);
        if (!k) {
          return Status::InvalidArgument(Location(path, kkey.source()) + ": unknown key " + SQuote(key) +
                                         " in [" + section + "]" + SuggestKey(schema, section, key));
        }
        const std::string where = Location(path, knode.source());
        auto v = FromToml(knode, *k);
        if (!v.ok()) return v.status().WithContext(where + ": " + k->Name());
        FM_RETURN_IF_ERROR(CheckValue(*k, *v).WithContext(where + ": " + k->Name()));
        out.entries_[FullName(section, key)] = {std::move(*v), k->type, where, true};
      }
    }
  }

  for (Override& o : parsed) {
    out.entries_[FullName(o.key->section, o.key->key)] = {std::move(o.value), o.key->type, o.flag, true};
  }

  for (const ConfigKey& k : schema.keys) {
    if (k.required && !out.IsSet(k.section, k.key)) {
      std::string where = path.empty() ? "no config file given" : path;
      return Status::InvalidArgument(where + ": missing required key " + k.Name() + " (" + k.doc +
                                     "); add it under [" + k.section + "] or pass --set " + k.section +
                                     "." + k.key + "=...");
    }
  }

  const fs::path base = path.empty() ? fs::path() : fs::path(path).parent_path();
  for (const ConfigKey& k : schema.keys) {
    if (k.path == PathKind::kNone) continue;
    ConfigValues::Entry& e = out.entries_[FullName(k.section, k.key)];
    if (e.origin.rfind("--set ", 0) == 0) continue;  // command-line paths stay cwd-relative
    auto& s = std::get<std::string>(e.value);
    s = Resolve(base, s, k.path);
  }
  return out;
}

Result<ConfigValues> LoadConfig(const ConfigSchema& schema, const std::string& path,
                                const std::vector<std::string>& set_overrides) {
  try {
    return ConfigLoaderImpl::Load(schema, path, set_overrides);
  } catch (const std::exception& e) {  // e.g. bad_alloc, filesystem_error: never escape
    return Status::Internal(std::string("loading config '") + path + "': " + e.what());
  }
}

Status AttributeToKey(const Status& status, const ConfigValues& values,
                      const std::vector<FieldKey>& fields) {
  if (status.ok()) return status;
  const FieldKey* best = nullptr;
  size_t best_pos = std::string::npos;
  const FieldKey* fallback = nullptr;
  for (const FieldKey& f : fields) {
    if (f.fragment.empty()) {
      if (!fallback) fallback = &f;
      continue;
    }
    size_t pos = status.message().find(f.fragment);
    // Earliest mention wins; at equal positions the longer fragment (min_available_clients
    // over min_clients would not tie, but "index" inside a longer word could).
    if (pos != std::string::npos &&
        (pos < best_pos || (pos == best_pos && f.fragment.size() > best->fragment.size()))) {
      best = &f;
      best_pos = pos;
    }
  }
  if (!best) best = fallback;
  std::string file = values.config_path().empty() ? "config" : values.config_path();
  if (!best) return status.WithContext(file);
  std::string origin = values.Origin(best->section, best->key);
  if (origin == "default") origin = file + " (default)";
  return status.WithContext(origin + ": [" + std::string(best->section) + "] " + std::string(best->key));
}

Status CheckEndpointKey(const ConfigValues& values, std::string_view section, std::string_view key,
                        EndpointUse use) {
  const std::string& endpoint = values.GetString(section, key);
  if (endpoint.empty()) return Status::OK();
  return AttributeToKey(CheckZmqEndpoint(endpoint, use), values, {{"", section, key}});
}

Status CheckHostPortKey(const ConfigValues& values, std::string_view section, std::string_view key) {
  const std::string& text = values.GetString(section, key);
  if (text.empty()) return Status::OK();
  return AttributeToKey(ParseHostPort(text, "").status(), values, {{"", section, key}});
}

const ConfigValues::Entry& ConfigValues::Get(std::string_view section, std::string_view key,
                                             ConfigType type) const {
  auto it = entries_.find(FullName(section, key));
  FM_CHECK(it != entries_.end());
  FM_CHECK(it->second.type == type);
  return it->second;
}

const std::string& ConfigValues::GetString(std::string_view section, std::string_view key) const {
  return std::get<std::string>(Get(section, key, ConfigType::kString).value);
}
int64_t ConfigValues::GetInt(std::string_view section, std::string_view key) const {
  return std::get<int64_t>(Get(section, key, ConfigType::kInt).value);
}
double ConfigValues::GetFloat(std::string_view section, std::string_view key) const {
  return std::get<double>(Get(section, key, ConfigType::kFloat).value);
}
bool ConfigValues::GetBool(std::string_view section, std::string_view key) const {
  return std::get<bool>(Get(section, key, ConfigType::kBool).value);
}
const std::vector<double>& ConfigValues::GetFloatList(std::string_view section,
                                                     std::string_view key) const {
  return std::get<std::vector<double>>(Get(section, key, ConfigType::kFloatList).value);
}

const std::vector<std::string>& ConfigValues::GetStringList(std::string_view section,
                                                            std::string_view key) const {
  return std::get<std::vector<std::string>>(Get(section, key, ConfigType::kStringList).value);
}

bool ConfigValues::IsSet(std::string_view section, std::string_view key) const {
  auto it = entries_.find(FullName(section, key));
  return it != entries_.end() && it->second.set;
}

const std::string& ConfigValues::Origin(std::string_view section, std::string_view key) const {
  auto it = entries_.find(FullName(section, key));
  FM_CHECK(it != entries_.end());
  return it->second.origin;
}

}  // namespace fedmesh
