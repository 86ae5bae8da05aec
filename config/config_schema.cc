#include "config/config_schema.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <sstream>

namespace fedmesh {

namespace {

std::string FormatNumber(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, end);
  // A float key's default must read back as a float in TOML: "1" -> "1.0".
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Pipes would end a Markdown table cell.
std::string Cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string_view ConfigTypeName(ConfigType type) {
  switch (type) {
    case ConfigType::kString: return "string";
    case ConfigType::kInt: return "integer";
    case ConfigType::kFloat: return "float";
    case ConfigType::kBool: return "boolean";
    case ConfigType::kStringList: return "list of strings";
    case ConfigType::kFloatList: return "list of floats";
  }
  return "?";
}

std::string ConfigKey::Name() const { return "[" + section + "] " + key; }

std::string ConfigKey::RangeText() const {
  auto num = [this](double v) {
    return type == ConfigType::kInt ? std::to_string(static_cast<int64_t>(v)) : FormatNumber(v);
  };
  if (min && max) {
    return "in " + std::string(min_exclusive ? "(" : "[") + num(*min) + ", " + num(*max) +
           (max_exclusive ? ")" : "]");
  }
  if (min) return (min_exclusive ? "> " : ">= ") + num(*min);
  if (max) return (max_exclusive ? "< " : "<= ") + num(*max);
  return "";
}

ConfigKey ConfigKey::Min(double v, bool exclusive) const {
  ConfigKey k = *this;
  k.min = v;
  k.min_exclusive = exclusive;
  return k;
}

ConfigKey ConfigKey::Max(double v, bool exclusive) const {
  ConfigKey k = *this;
  k.max = v;
  k.max_exclusive = exclusive;
  return k;
}

ConfigKey ConfigKey::Choices(std::vector<std::string> c) const {
  ConfigKey k = *this;
  k.choices = std::move(c);
  return k;
}

ConfigKey ConfigKey::Path(PathKind kind) const {
  ConfigKey k = *this;
  k.path = kind;
  return k;
}

namespace {
ConfigKey MakeKey(std::string section, std::string key, ConfigType type, ConfigValue def,
                  std::string doc) {
  ConfigKey k;
  k.section = std::move(section);
  k.key = std::move(key);
  k.type = type;
  k.default_value = std::move(def);
  k.doc = std::move(doc);
  return k;
}
}  // namespace

ConfigKey StringKey(std::string section, std::string key, std::string def, std::string doc) {
  return MakeKey(std::move(section), std::move(key), ConfigType::kString, std::move(def), std::move(doc));
}
ConfigKey IntKey(std::string section, std::string key, int64_t def, std::string doc) {
  return MakeKey(std::move(section), std::move(key), ConfigType::kInt, def, std::move(doc));
}
ConfigKey FloatKey(std::string section, std::string key, double def, std::string doc) {
  return MakeKey(std::move(section), std::move(key), ConfigType::kFloat, def, std::move(doc));
}
ConfigKey BoolKey(std::string section, std::string key, bool def, std::string doc) {
  return MakeKey(std::move(section), std::move(key), ConfigType::kBool, def, std::move(doc));
}
ConfigKey StringListKey(std::string section, std::string key, std::vector<std::string> def,
                        std::string doc) {
  return MakeKey(std::move(section), std::move(key), ConfigType::kStringList, std::move(def),
                 std::move(doc));
}
ConfigKey FloatListKey(std::string section, std::string key, std::vector<double> def,
                       std::string doc) {
  return MakeKey(std::move(section), std::move(key), ConfigType::kFloatList, std::move(def),
                 std::move(doc));
}
ConfigKey RequiredKey(std::string section, std::string key, ConfigType type, std::string doc) {
  static const ConfigValue kZero[] = {std::string(), int64_t{0}, 0.0, false,
                                      std::vector<std::string>(), std::vector<double>()};
  ConfigKey k = MakeKey(std::move(section), std::move(key), type, kZero[static_cast<int>(type)],
                        std::move(doc));
  k.required = true;
  return k;
}

const ConfigKey* ConfigSchema::Find(std::string_view section, std::string_view key) const {
  for (const ConfigKey& k : keys) {
    if (k.section == section && k.key == key) return &k;
  }
  return nullptr;
}

bool ConfigSchema::HasSection(std::string_view section) const {
  return std::any_of(keys.begin(), keys.end(), [&](const ConfigKey& k) { return k.section == section; });
}

std::vector<std::string> ConfigSchema::Sections() const {
  std::vector<std::string> out;
  for (const ConfigKey& k : keys) {
    if (std::find(out.begin(), out.end(), k.section) == out.end()) out.push_back(k.section);
  }
  return out;
}

std::string FormatDefault(const ConfigKey& key) {
  if (key.required) return "(required)";
  const ConfigValue& v = key.default_value;
  switch (key.type) {
    case ConfigType::kString: return Quote(std::get<std::string>(v));
    case ConfigType::kInt: return std::to_string(std::get<int64_t>(v));
    case ConfigType::kFloat: return FormatNumber(std::get<double>(v));
    case ConfigType::kBool: return std::get<bool>(v) ? "true" : "false";
    case ConfigType::kStringList: {
      std::string out = "[";
      for (const std::string& s : std::get<std::vector<std::string>>(v)) {
        out += (out.size() > 1 ? ", " : "") + Quote(s);
      }
      return out + "]";
    }
    case ConfigType::kFloatList: {
      std::string out = "[";
      for (double d : std::get<std::vector<double>>(v)) {
        out += (out.size() > 1 ? ", " : "") + FormatNumber(d);
      }
      return out + "]";
    }
  }
  return "";
}

std::string RenderConfigDocs(const ConfigSchema& schema) {
  std::ostringstream out;
  out << "## " << schema.name << "\n\n" << schema.description << "\n";
  for (const std::string& section : schema.Sections()) {
    out << "\n### [" << section << "]\n\n"
        << "| key | type | default | allowed | description |\n"
        << "|---|---|---|---|---|\n";
    for (const ConfigKey& k : schema.keys) {
      if (k.section != section) continue;
      std::string allowed = k.RangeText();
      if (!k.choices.empty()) {
        for (const std::string& c : k.choices) allowed += (allowed.empty() ? "" : ", ") + Quote(c);
      }
      if (k.path == PathKind::kPath) allowed += allowed.empty() ? "path" : ", path";
      if (k.path == PathKind::kDataSource) allowed += allowed.empty() ? "data source" : ", data source";
      out << "| `" << k.key << "` | " << ConfigTypeName(k.type) << " | `" << Cell(FormatDefault(k))
          << "` | " << Cell(allowed) << " | " << Cell(k.doc) << " |\n";
    }
  }
  return out.str();
}

std::string RenderConfigDocsPage(const std::vector<const ConfigSchema*>& schemas) {
  std::ostringstream out;
  out << R"(# Configuration files

<!-- Generated from the *_config.cc schemas (config/, aggregator/, node/, sim/) by RenderConfigDocsPage; do not edit by hand.
     ConfigDocs.UpToDate (tests/sim/config_docs_test.cc) fails and prints the new text
     when this file is out of date. -->

`fedmesh-node` and `fedmesh-aggregator` each read one TOML file (`--config FILE`). Every
key has a documented default unless it is marked *(required)*; a file only needs the keys
it changes. Runnable examples: `examples/fashion-mnist/`.

## Overriding keys: `--set section.key=value`

Any key can be overridden on the command line, e.g. `--set train.lr=0.05` or
`--set rounds.total=20`; `--set` wins over the file, and a later `--set` of the same key
wins over an earlier one. The value is read as the key's type: `0.01` for a float, `5` for
an integer, `true`/`false` for a boolean, `a,b,c` for a list of strings (an empty value is
an empty list), and the text as is for a string (no quotes needed). Integers are also
accepted where a float is expected.

## Relative paths

Keys marked *path* (and the `PATH` of a `csv:PATH` data source) are resolved against the
**directory of the config file** when the value comes from the file or is the default, so
a site's key, database and data stay next to its config whatever the working directory of
the service. A value given with `--set` is resolved against the working directory, like
any other command-line path. Absolute paths are kept; an empty path stays empty. With no
config file, every relative path is relative to the working directory.

## Errors

A config that cannot be used stops the binary before it does anything, with a message
naming the file (with line:column) or the `--set` flag, and the key:

- a TOML syntax error, with its line and column;
- a missing or unreadable file;
- an unknown section or key, with the closest known key suggested;
- a value of the wrong type (the message gives the expected type and what it got);
- a value out of range or not among the allowed choices;
- a missing required key;
- a malformed `--set` (no `=`, or no `section.` before the key);
- inconsistent values, e.g. `[data] index` not below `[data] num_partitions`.
)";
  for (const ConfigSchema* s : schemas) out << "\n" << RenderConfigDocs(*s);
  return out.str();
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string_view ClosestName(std::string_view typed, const std::vector<std::string_view>& known) {
  std::string_view best;
  size_t best_d = SIZE_MAX;
  for (std::string_view name : known) {
    if (const size_t d = EditDistance(typed, name); d < best_d) best_d = d, best = name;
  }
  return best_d <= 2 || best_d <= typed.size() / 3 ? best : std::string_view();
}

}  // namespace fedmesh
