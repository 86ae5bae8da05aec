#include "provision/project.h"

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <set>
#include <string_view>

#include "config/config_schema.h"
#include "crypto/identity.h"

namespace fedmesh {

namespace {

std::string Where(const std::string& path, const toml::source_region& r, const std::string& key) {
  return path + ":" + std::to_string(r.begin.line) + ": " + key;
}

Result<std::string> String(const toml::table& t, const std::string& path, const char* section, const char* key,
                           bool required, std::string def = "") {
  const toml::node* n = t.get(key);
  if (n == nullptr) {
    if (required)
      return Status::InvalidArgument(path + ": [" + section + "] " + key + " is required");
    return def;
  }
  auto v = n->value<std::string>();
  if (!v || v->empty())
    return Status::InvalidArgument(Where(path, n->source(), std::string("[") + section + "] " + key) +
                                   " must be a non-empty string");
  return *v;
}

// A misspelt key (adress = ...) would otherwise be dropped without a word and its default
// used: refuse every key `section` does not know, suggesting the closest as the config
// loader (config/config_loader.cc) does.
Status KnownKeys(const toml::table& t, const std::string& path, const std::string& section,
                 std::initializer_list<std::string_view> known) {
  const std::vector<std::string_view> names(known);
  for (const auto& [k, v] : t) {
    const std::string_view key = k.str();
    if (std::find(names.begin(), names.end(), key) != names.end()) continue;
    std::string list;
    for (std::string_view name : names) list += (list.empty() ? "" : ", ") + std::string(name);
    const std::string_view best = ClosestName(key, names);
    return Status::InvalidArgument(
        Where(path, k.source(), section + " " + std::string(key)) + ": unknown key (" +
        (best.empty() ? "" : "did you mean '" + std::string(best) + "'? ") + "known: " + list + ")");
  }
  return Status::OK();
}

// [federation] id is every kit's; a config table's own [federation] id may repeat it, not
// change it (the aggregator would refuse the sites of its own project). `t` holds the
// config table as parsed (a copy keeps no line numbers).
Status SameFederation(const toml::table& t, const ProjectConfig& p, const std::string& where) {
  const toml::node* n = t.at_path("config.federation.id").node();
  if (n == nullptr) return Status::OK();
  const auto id = n->value<std::string>();
  if (id && *id == p.federation_id) return Status::OK();
  return Status::InvalidArgument(Where(p.path, n->source(), "[" + where + ".federation] id") +
                                 " is " + (id ? "\"" + *id + "\"" : "not a string") +
                                 ", but [federation] id is \"" + p.federation_id +
                                 "\"; every kit gets [federation] id: remove the one in " + where);
}

Result<toml::table> Config(const toml::table& t, const std::string& path, const std::string& where) {
  const toml::node* n = t.get("config");
  if (n == nullptr) return toml::table{};
  if (!n->is_table())
    return Status::InvalidArgument(Where(path, n->source(), where + ".config") + " must be a table of config sections");
  return *n->as_table();
}

// The tables of the array of tables [[key]] (none when absent).
Result<std::vector<const toml::table*>> Tables(const toml::table& root, const char* key, const std::string& path) {
  std::vector<const toml::table*> out;
  const std::string where = std::string("[[") + key + "]]";
  const toml::node* n = root.get(key);
  if (n == nullptr) return out;
  const toml::array* a = n->as_array();
  if (a == nullptr) return Status::InvalidArgument(Where(path, n->source(), where) + " must be an array of tables");
  for (const toml::node& e : *a) {
    if (!e.is_table()) return Status::InvalidArgument(Where(path, e.source(), where) + " must be a table");
    out.push_back(e.as_table());
  }
  return out;
}

// The name of a [[site]] or [[admin]]: a valid id, not taken by another participant.
Result<std::string> UniqueName(const toml::table& t, const std::string& path, const char* section,
                               std::set<std::string>& names) {
  FM_ASSIGN_OR_RETURN(std::string name, String(t, path, section, "name", true));
  const std::string where = std::string("[[") + section + "]] name";
  if (Status v = ValidateSiteName(name); !v.ok())
    return Status::InvalidArgument(Where(path, t.get("name")->source(), where) + ": " + v.message());
  if (!names.insert(name).second)
    return Status::InvalidArgument(Where(path, t.get("name")->source(), where) + " \"" + name +
                                   "\" is used twice (site, admin and aggregator names share one space)");
  return name;
}

}  // namespace

Result<ProjectConfig> LoadProject(const std::string& path) {
  if (!std::ifstream(path)) return Status::NotFound("project file '" + path + "' cannot be read");
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return Status::InvalidArgument(path + ":" + std::to_string(e.source().begin.line) +
                                   ": TOML syntax error: " + std::string(e.description()));
  } catch (const std::exception& e) {
    return Status::IOError("project file '" + path + "': " + e.what());
  }
  ProjectConfig p;
  p.path = path;
  for (const auto& [k, v] : root) {
    const std::string key(k.str());
    if (key != "federation" && key != "aggregator" && key != "site" && key != "site_defaults" && key != "kits" &&
        key != "admin")
      return Status::InvalidArgument(Where(path, v.source(), "[" + key + "]") +
                                     ": unknown section (federation, aggregator, site_defaults, site, admin, kits)");
  }
  const toml::table* fed = root["federation"].as_table();
  if (fed == nullptr) return Status::InvalidArgument(path + ": [federation] id is required");
  FM_RETURN_IF_ERROR(KnownKeys(*fed, path, "[federation]", {"id"}));
  FM_ASSIGN_OR_RETURN(p.federation_id, String(*fed, path, "federation", "id", true));
  const toml::table* agg = root["aggregator"].as_table();
  if (agg == nullptr) return Status::InvalidArgument(path + ": [aggregator] address is required");
  FM_RETURN_IF_ERROR(
      KnownKeys(*agg, path, "[aggregator]",
                {"name", "address", "listen", "admin_address", "admin_listen", "config"}));
  FM_ASSIGN_OR_RETURN(p.aggregator_name, String(*agg, path, "aggregator", "name", false, "aggregator"));
  FM_ASSIGN_OR_RETURN(p.address, String(*agg, path, "aggregator", "address", true));
  FM_ASSIGN_OR_RETURN(p.listen, String(*agg, path, "aggregator", "listen", false, p.address));
  if (p.address.rfind("tcp://", 0) != 0 || p.address.find(':', 6) == std::string::npos)
    return Status::InvalidArgument(Where(path, agg->get("address")->source(), "[aggregator] address") +
                                   " is \"" + p.address + "\"; it must be tcp://HOST:PORT, what the sites dial");
  if (Status s = ValidateSiteName(p.aggregator_name); !s.ok())
    return Status::InvalidArgument(path + ": [aggregator] name: " + s.message());
  FM_ASSIGN_OR_RETURN(p.aggregator_config, Config(*agg, path, "[aggregator]"));
  FM_RETURN_IF_ERROR(SameFederation(*agg, p, "aggregator.config"));
  if (const toml::table* d = root["site_defaults"].as_table()) {
    FM_RETURN_IF_ERROR(KnownKeys(*d, path, "[site_defaults]", {"config"}));
    FM_ASSIGN_OR_RETURN(p.site_defaults, Config(*d, path, "[site_defaults]"));
    FM_RETURN_IF_ERROR(SameFederation(*d, p, "site_defaults.config"));
  }
  if (const toml::table* k = root["kits"].as_table()) {
    FM_RETURN_IF_ERROR(KnownKeys(*k, path, "[kits]", {"bin_dir"}));
    FM_ASSIGN_OR_RETURN(p.bin_dir, String(*k, path, "kits", "bin_dir", false, "/usr/bin"));
  }
  std::set<std::string> names = {p.aggregator_name};
  FM_ASSIGN_OR_RETURN(std::vector<const toml::table*> sites, Tables(root, "site", path));
  for (const toml::table* t : sites) {
    FM_RETURN_IF_ERROR(KnownKeys(*t, path, "[[site]]", {"name", "organisation", "config"}));
    ProjectSite site;
    FM_ASSIGN_OR_RETURN(site.name, UniqueName(*t, path, "site", names));
    FM_ASSIGN_OR_RETURN(site.organisation, String(*t, path, "site", "organisation", false, ""));
    FM_ASSIGN_OR_RETURN(site.config, Config(*t, path, "[[site]] " + site.name));
    FM_RETURN_IF_ERROR(SameFederation(*t, p, "site.config"));
    p.sites.push_back(std::move(site));
  }
  FM_ASSIGN_OR_RETURN(p.admin_address, String(*agg, path, "aggregator", "admin_address", false, ""));
  FM_ASSIGN_OR_RETURN(p.admin_listen, String(*agg, path, "aggregator", "admin_listen", false, p.admin_address));
  FM_ASSIGN_OR_RETURN(std::vector<const toml::table*> admins, Tables(root, "admin", path));
  for (const toml::table* t : admins) {
    FM_RETURN_IF_ERROR(KnownKeys(*t, path, "[[admin]]", {"name", "role"}));
    ProjectAdmin admin;
    FM_ASSIGN_OR_RETURN(admin.name, UniqueName(*t, path, "admin", names));
    FM_ASSIGN_OR_RETURN(admin.role, String(*t, path, "admin", "role", false, "admin"));
    if (admin.role != "admin" && admin.role != "observer")
      return Status::InvalidArgument(Where(path, t->get("role")->source(), "[[admin]] role") + " is \"" +
                                     admin.role + "\"; it must be \"admin\" or \"observer\"");
    p.admins.push_back(std::move(admin));
  }
  if (!p.admins.empty() && p.admin_address.empty())
    return Status::InvalidArgument(path + ": [aggregator] admin_address (tcp://HOST:PORT, what admins dial) is "
                                          "required with [[admin]] entries");
  if (!p.admin_address.empty() &&
      (p.admin_address.rfind("tcp://", 0) != 0 || p.admin_address.find(':', 6) == std::string::npos))
    return Status::InvalidArgument(Where(path, agg->get("admin_address")->source(), "[aggregator] admin_address") +
                                   " is \"" + p.admin_address + "\"; it must be tcp://HOST:PORT");
  return p;
}

}  // namespace fedmesh
