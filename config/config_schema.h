// ConfigSchema: the one list of the keys a fedmesh TOML config file may hold (section, key,
// type, default, range, one line of documentation). The loader (config/config_loader.h)
// checks files and --set overrides against it, and docs/config.md is rendered from it, so
// the documentation cannot drift from what the binaries accept.
// Thread-safety: schemas are immutable values; the functions here are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace fedmesh {

enum class ConfigType { kString, kInt, kFloat, kBool, kStringList, kFloatList };

// "string", "integer", "float", "boolean", "list of strings": the words error messages use.
std::string_view ConfigTypeName(ConfigType type);

// The value of one key; the alternative matches the key's ConfigType, in enum order.
using ConfigValue =
    std::variant<std::string, int64_t, double, bool, std::vector<std::string>, std::vector<double>>;

// How a relative string value is resolved (see docs/config.md, "Relative paths").
enum class PathKind {
  kNone,        // not a path: kept as written
  kPath,        // a file or directory path
  kDataSource,  // a data source name; only the PATH of "csv:PATH" is a path
};

struct ConfigKey {
  std::string section;  // e.g. "train"
  std::string key;      // e.g. "lr"
  ConfigType type = ConfigType::kString;
  ConfigValue default_value;  // ignored when required
  std::string doc;            // one sentence for docs/config.md
  bool required = false;      // no default: the file or a --set must give it
  // Inclusive/exclusive bounds for kInt and kFloat keys.
  std::optional<double> min;
  std::optional<double> max;
  bool min_exclusive = false;
  bool max_exclusive = false;
  // kString only: when not empty, the value must be one of these.
  std::vector<std::string> choices;
  PathKind path = PathKind::kNone;

  // "[train] lr", the spelling every message uses.
  std::string Name() const;
  // "> 0", "in [0, 1)", ">= 1": empty when unbounded.
  std::string RangeText() const;

  // Copies with one more property, for building schemas as lists of expressions.
  ConfigKey Min(double v, bool exclusive = false) const;
  ConfigKey Max(double v, bool exclusive = false) const;
  ConfigKey Choices(std::vector<std::string> c) const;
  ConfigKey Path(PathKind kind = PathKind::kPath) const;
};

// Builders: a key with its default (or none: RequiredKey).
ConfigKey StringKey(std::string section, std::string key, std::string def, std::string doc);
ConfigKey IntKey(std::string section, std::string key, int64_t def, std::string doc);
ConfigKey FloatKey(std::string section, std::string key, double def, std::string doc);
ConfigKey BoolKey(std::string section, std::string key, bool def, std::string doc);
ConfigKey StringListKey(std::string section, std::string key, std::vector<std::string> def,
                        std::string doc);
// A list of numbers (a TOML array of floats or integers; "1.5,2" with --set); Min/Max
// bound every element.
ConfigKey FloatListKey(std::string section, std::string key, std::vector<double> def,
                       std::string doc);
ConfigKey RequiredKey(std::string section, std::string key, ConfigType type, std::string doc);

struct ConfigSchema {
  std::string name;         // "fedmesh-node": the binary that reads this config
  std::string description;  // a short paragraph for docs/config.md
  std::vector<ConfigKey> keys;

  // nullptr when the schema has no such key.
  const ConfigKey* Find(std::string_view section, std::string_view key) const;
  bool HasSection(std::string_view section) const;
  // Section names in first-appearance order.
  std::vector<std::string> Sections() const;
};

// The default value as TOML would spell it: "0.01", "\"fedavg\"", "[]", or "(required)".
std::string FormatDefault(const ConfigKey& key);

// Markdown for one schema: a heading, its description and one table per section.
std::string RenderConfigDocs(const ConfigSchema& schema);

// The whole of docs/config.md: the general rules (file format, --set, relative paths,
// errors) followed by RenderConfigDocs of each schema.
std::string RenderConfigDocsPage(const std::vector<const ConfigSchema*>& schemas);

// Levenshtein distance, for "did you mean" suggestions.
size_t EditDistance(std::string_view a, std::string_view b);
// The name of `known` closest to `typed` when it is close enough to be a misspelling of it
// (edit distance at most 2, or at most a third of typed's length); empty otherwise.
std::string_view ClosestName(std::string_view typed, const std::vector<std::string_view>& known);

}  // namespace fedmesh
