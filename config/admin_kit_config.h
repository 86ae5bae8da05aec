// An admin kit's config (admin.toml, written by fedmesh-provision for every [[admin]] of the
// project): who this admin is, its key, and the aggregator's admin endpoint and public key.
// fedmesh-admin --kit DIR reads DIR/admin.toml. Thread-safety: pure functions.
#pragma once

#include <string>

#include "config/config_schema.h"
#include "core/status.h"

namespace fedmesh {

struct AdminKitConfig {
  std::string config_path;
  std::string name;        // [admin] name: the key's name, as the aggregator logs it
  std::string key_path;    // [admin] key: this admin's key pair (0600)
  std::string endpoint;    // [admin] endpoint: the aggregator's [admin] listen, as dialled
  std::string server_key;  // [admin] server_key: the aggregator's public key
  int timeout_ms = 10000;  // [admin] timeout_ms
};

const ConfigSchema& AdminKitConfigSchema();
// Errors name the file, the line and the key (LoadConfig's); exit code 2 material.
Result<AdminKitConfig> LoadAdminKitConfig(const std::string& path);

}  // namespace fedmesh
