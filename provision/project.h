// ProjectConfig: fedmesh-provision's one project file (docs/provisioning.md): the
// federation, the aggregator's address, the sites with their organisation, and the config
// keys every kit's config file gets. Parsed with toml++; every error names the file, the
// line and the key. Thread-safety: pure functions and values.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "core/status.h"

namespace fedmesh {

struct ProjectSite {
  std::string name;          // id rules (ValidateSiteName); also its key's name
  std::string organisation;  // free text for the README; may be empty
  toml::table config;        // [site.config]: this site's own keys (e.g. [data])
};

// An [[admin]]: a person or tool that may use fedmesh-admin on the aggregator.
struct ProjectAdmin {
  std::string name;            // id rules; its key's name, logged with every action
  std::string role = "admin";  // "admin" (may change) or "observer" (may only read)
};

struct ProjectConfig {
  std::string path;           // the project file
  std::string federation_id;  // [federation] id
  std::string aggregator_name = "aggregator";
  std::string address;        // [aggregator] address: the endpoint sites dial
  std::string listen;         // [aggregator] listen: what it binds (default: address)
  toml::table aggregator_config;  // [aggregator.config]: copied into aggregator.toml
  toml::table site_defaults;      // [site_defaults.config]: into every site.toml
  std::vector<ProjectSite> sites;
  // [aggregator] admin_address: the admin endpoint admins dial (tcp://HOST:PORT); and
  // admin_listen: what the aggregator binds for it (default: admin_address). Required with
  // [[admin]] entries.
  std::string admin_address;
  std::string admin_listen;
  std::vector<ProjectAdmin> admins;
  // Where the kits' systemd units find the binaries (default /usr/bin).
  std::string bin_dir = "/usr/bin";
};

// Reads and checks `path`: a federation id, an address (tcp://HOST:PORT), unique site
// names that are valid ids and differ from the aggregator's. InvalidArgument naming
// file:line and the key otherwise.
Result<ProjectConfig> LoadProject(const std::string& path);

}  // namespace fedmesh
