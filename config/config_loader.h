// LoadConfig: reads a TOML config file, applies `--set section.key=value` overrides and
// checks every value against a ConfigSchema (known sections and keys, types, ranges,
// choices, required keys). Errors are Status values whose message names the file with
// line:column (or the --set flag) and the key; toml++ exceptions never escape.
// Relative paths in path keys are resolved as docs/config.md ("Relative paths") describes.
// Thread-safety: LoadConfig is reentrant; ConfigValues is an immutable value once loaded.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "config/config_schema.h"
#include "config/zmq_endpoint.h"

namespace fedmesh {

// Every key of a schema with its final value: the default, the file's, or a --set's.
class ConfigValues {
 public:
  // REQUIRES (checked): the schema has [section] key with the accessor's type.
  const std::string& GetString(std::string_view section, std::string_view key) const;
  int64_t GetInt(std::string_view section, std::string_view key) const;
  double GetFloat(std::string_view section, std::string_view key) const;
  bool GetBool(std::string_view section, std::string_view key) const;
  const std::vector<std::string>& GetStringList(std::string_view section, std::string_view key) const;
  const std::vector<double>& GetFloatList(std::string_view section, std::string_view key) const;

  // True when the file or a --set gave the key (false: the default applies).
  bool IsSet(std::string_view section, std::string_view key) const;
  // Where the value came from: "dir/node.toml:7:1", "--set train.lr=0.1" or "default".
  const std::string& Origin(std::string_view section, std::string_view key) const;

  // The config file as given to LoadConfig; empty when there was none.
  const std::string& config_path() const { return config_path_; }

 private:
  friend class ConfigLoaderImpl;
  struct Entry {
    ConfigValue value;
    ConfigType type;
    std::string origin;
    bool set = false;
  };
  const Entry& Get(std::string_view section, std::string_view key, ConfigType type) const;

  std::string config_path_;
  std::map<std::string, Entry, std::less<>> entries_;  // keyed "section.key"
};

// Loads `path` (empty: no file, defaults only), then applies `set_overrides`, each
// "section.key=value", in order. Errors: NotFound for a missing file; InvalidArgument for
// a syntax error, unknown section/key (with the closest known one), wrong type, value out
// of range, missing required key, or a malformed override.
Result<ConfigValues> LoadConfig(const ConfigSchema& schema, const std::string& path,
                                const std::vector<std::string>& set_overrides);

// Names the key behind an error from a validator run on the options struct a config
// filled. `fields` maps a word the validator's messages use (a field name) to its key; the
// field mentioned first in the message wins. The result reads
// "<where the key was set>: [section] key: <message>"; OK stays OK, and a message that
// names no listed field is prefixed with the config file only.
struct FieldKey {
  std::string_view fragment;  // e.g. "min_clients"; empty: the key when no other matches
  std::string_view section;   // e.g. "rounds"
  std::string_view key;       // e.g. "min_clients"
};
Status AttributeToKey(const Status& status, const ConfigValues& values,
                      const std::vector<FieldKey>& fields);

// For a file or directory a config key names, read after the config loaded (a key file, an
// allow directory): an error is prefixed with the config file and the key, "node.toml:
// [node] key: key file keys/n.key does not exist", so the user knows which setting to fix.
template <typename T>
Result<T> FromKey(Result<T> r, const std::string& config_path, std::string_view section, std::string_view key) {
  if (r.ok()) return r;
  return r.status().WithContext((config_path.empty() ? std::string("config") : config_path) + ": [" +
                                std::string(section) + "] " + std::string(key));
}

// CheckZmqEndpoint (config/zmq_endpoint.h) on a string key's value, naming the key and where
// it was set; OK for an empty value (the key is unset).
Status CheckEndpointKey(const ConfigValues& values, std::string_view section, std::string_view key,
                        EndpointUse use);

// ParseHostPort (core/host_port.h) on a string key's value ([metrics] listen, [status_page]
// listen), naming the key and where it was set; OK for an empty value.
Status CheckHostPortKey(const ConfigValues& values, std::string_view section, std::string_view key);

}  // namespace fedmesh
