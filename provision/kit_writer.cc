#include "provision/kit_writer.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "aggregator/aggregator_config.h"
#include "config/admin_kit_config.h"
#include "crypto/identity.h"
#include "crypto/key_files.h"
#include "node/node_config.h"

namespace fedmesh {

namespace {

namespace fs = std::filesystem;

// `src` over `dst`, table by table (a key set in both takes src's value).
void Merge(toml::table& dst, const toml::table& src) {
  for (const auto& [k, v] : src) {
    if (const toml::table* t = v.as_table(); t != nullptr && dst[k].is_table()) {
      Merge(*dst[k].as_table(), *t);
    } else {
      dst.insert_or_assign(k, v);
    }
  }
}

Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return Status::IOError("cannot write " + path.string());
  return Status::OK();
}

std::string Toml(const toml::table& t) {
  std::ostringstream os;
  os << t;
  return os.str() + "\n";
}

// Public keys other participants must trust go in a 0755 folder: the aggregator refuses a
// group- or world-writable allowlist.
Status MakeDir(const fs::path& dir, fs::perms perms) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir.string() + ": " + ec.message());
  fs::permissions(dir, perms, fs::perm_options::replace, ec);
  if (ec) return Status::IOError("cannot set the mode of " + dir.string() + ": " + ec.message());
  return Status::OK();
}

constexpr fs::perms kPublicDir = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                 fs::perms::others_read | fs::perms::others_exec;

std::string Unit(const ProjectConfig& p, const std::string& name, const std::string& binary,
                 const std::string& config_file, const std::string& state_sets, const std::string& what) {
  return "# " + what + " of federation " + p.federation_id + ", made by fedmesh-provision.\n"
         "# Install: copy this kit to /etc/fedmesh/" + name + "/, then\n"
         "#   cp fedmesh-" + name + ".service /etc/systemd/system/ && systemctl enable --now fedmesh-" + name + "\n"
         "[Unit]\n"
         "Description=fedmesh " + what + " " + name + " (federation " + p.federation_id + ")\n"
         "After=network-online.target\n"
         "Wants=network-online.target\n\n"
         "[Service]\n"
         "Type=simple\n"
         "User=fedmesh\n"
         "Group=fedmesh\n"
         "WorkingDirectory=/etc/fedmesh/" + name + "\n"
         "ExecStart=" + p.bin_dir + "/" + binary + " --config /etc/fedmesh/" + name + "/" + config_file +
         state_sets + "\n"
         "ExecReload=/bin/kill -HUP $MAINPID\n"
         "Restart=on-failure\n"
         "RestartSec=5\n"
         "StateDirectory=fedmesh/" + name + "\n"
         "StateDirectoryMode=0700\n"
         "ProtectSystem=strict\n"
         "ProtectHome=true\n"
         "PrivateTmp=true\n"
         "PrivateDevices=true\n"
         "NoNewPrivileges=true\n"
         "ProtectKernelTunables=true\n"
         "ProtectKernelModules=true\n"
         "ProtectControlGroups=true\n"
         "RestrictSUIDSGID=true\n"
         "LockPersonality=true\n"
         "UMask=0077\n\n"
         "[Install]\n"
         "WantedBy=multi-user.target\n";
}

std::string Readme(const ProjectConfig& p, const std::string& name, const std::string& role,
                   const std::string& command, const std::string& notes) {
  return "# " + name + ": " + role + " of federation `" + p.federation_id + "`\n\n"
         "Made by `fedmesh-provision` from `" + fs::path(p.path).filename().string() + "`.\n\n"
         "Start it from this folder:\n\n```sh\n" + command + "\n```\n\n" + notes +
         "\nAs a service: copy this folder to `/etc/fedmesh/" + name + "/` and install the unit in it "
         "(its first lines say how); it runs as the unprivileged user `fedmesh`, keeps its state in "
         "`/var/lib/fedmesh/" + name + "`, and `systemctl reload` sends it SIGHUP.\n";
}

Status WriteSiteKit(const ProjectConfig& p, const fs::path& kits, const std::string& name,
                    const std::string& organisation, const toml::table& own_config,
                    const std::vector<fs::path>& site_pubs, const Identity* identity,
                    const fs::path& public_key) {
  const fs::path dir = kits / name;
  if (fs::exists(dir)) return Status::AlreadyExists("kit " + dir.string() + " exists; kits are never overwritten");
  FM_RETURN_IF_ERROR(MakeDir(dir, fs::perms::owner_all));
  if (identity != nullptr) {
    FM_RETURN_IF_ERROR(WriteIdentity((dir / name).string(), *identity));
  } else {
    fs::copy_file(public_key, dir / (name + ".pub"));
  }
  fs::copy_file(kits / p.aggregator_name / (p.aggregator_name + ".pub"), dir / "aggregator.pub");
  FM_RETURN_IF_ERROR(MakeDir(dir / "allow", kPublicDir));
  for (const fs::path& pub : site_pubs) fs::copy_file(pub, dir / "allow" / pub.filename());
  FM_RETURN_IF_ERROR(MakeDir(dir / "state", fs::perms::owner_all));
  toml::table root{
      {"federation", toml::table{{"id", p.federation_id}}},
      {"node", toml::table{{"id", name},
                           {"key", name + ".key"},
                           {"db", "state/" + name + ".db"},
                           {"metrics", "state/" + name + "-metrics.jsonl"}}},
      {"aggregator", toml::table{{"endpoint", p.address}, {"public_key", "aggregator.pub"}}},
      {"secagg", toml::table{{"allow", "allow"}}},
  };
  Merge(root, p.site_defaults);
  Merge(root, own_config);
  const std::string header = "# Site " + name + (organisation.empty() ? "" : " (" + organisation + ")") +
                             " of federation " + p.federation_id + ": made by fedmesh-provision from " +
                             fs::path(p.path).filename().string() + ". Every key: docs/config.md.\n";
  FM_RETURN_IF_ERROR(WriteText(dir / "site.toml", header + Toml(root)));
  if (auto c = LoadNodeConfig((dir / "site.toml").string(), {}); !c.ok())
    return c.status().WithContext("the config made for site " + name + " from " + p.path);
  FM_RETURN_IF_ERROR(WriteText(
      dir / ("fedmesh-" + name + ".service"),
      Unit(p, name, "fedmesh-node", "site.toml",
           " --set node.db=/var/lib/fedmesh/" + name + "/" + name + ".db --set node.metrics=/var/lib/fedmesh/" +
               name + "/metrics.jsonl",
           "site")));
  const std::string notes =
      identity != nullptr
          ? "`" + name + ".key` is this site's secret key (mode 0600): it never leaves this machine.\n"
          : "This kit holds no secret key: put the `" + name + ".key` you made with `fedmesh-keys gen` "
            "next to `" + name + ".pub` here.\n";
  return WriteText(dir / "README.md",
                   Readme(p, name, std::string("site") + (organisation.empty() ? "" : " (" + organisation + ")"),
                          "fedmesh-node --config site.toml",
                          notes + "It dials the aggregator at `" + p.address +
                              "` and trusts only `aggregator.pub`; `allow/` holds the sites it may share "
                              "a secure aggregation round with (read at start).\n"));
}

// An admin kit: its key pair, the aggregator's public key, admin.toml and a README.
Status WriteAdminKit(const ProjectConfig& p, const fs::path& kits, const ProjectAdmin& admin,
                     const Identity& identity) {
  const fs::path dir = kits / admin.name;
  FM_RETURN_IF_ERROR(MakeDir(dir, fs::perms::owner_all));
  FM_RETURN_IF_ERROR(WriteIdentity((dir / admin.name).string(), identity));
  fs::copy_file(kits / p.aggregator_name / (p.aggregator_name + ".pub"), dir / "aggregator.pub");
  toml::table root{{"admin", toml::table{{"name", admin.name},
                                         {"key", admin.name + ".key"},
                                         {"endpoint", p.admin_address},
                                         {"server_key", "aggregator.pub"}}}};
  FM_RETURN_IF_ERROR(WriteText(dir / "admin.toml",
                               "# " + admin.role + " " + admin.name + " of federation " + p.federation_id +
                                   ": made by fedmesh-provision. fedmesh-admin --kit reads it.\n" + Toml(root)));
  if (auto c = LoadAdminKitConfig((dir / "admin.toml").string()); !c.ok())
    return c.status().WithContext("the admin kit made for " + admin.name);
  const std::string may = admin.role == "admin"
                              ? "It may read (status, sites, rounds, log, export) and change (pause, resume, "
                                "abort, kick SITE)."
                              : "It is an observer: it may read (status, sites, rounds, log, export) but not "
                                "pause, resume, abort or kick.";
  return WriteText(dir / "README.md",
                   "# " + admin.name + ": " + admin.role + " of federation `" + p.federation_id + "`\n\n"
                   "Made by `fedmesh-provision` from `" + fs::path(p.path).filename().string() + "`. " + may +
                   "\n\nFrom this folder:\n\n```sh\nfedmesh-admin --kit . status\n```\n\n"
                   "It dials the aggregator's admin channel at `" + p.admin_address + "` (CurveZMQ, checking "
                   "`aggregator.pub`). `" + admin.name + ".key` (mode 0600) is this admin's secret key; "
                   "the aggregator logs every action with the name `" + admin.name + "`.\n");
}

// WriteKits once it checked that none of the kits exists.
Status WriteNewKits(const ProjectConfig& p, const fs::path& kits) {
  const fs::path dir = kits / p.aggregator_name;
  FM_RETURN_IF_ERROR(MakeDir(kits, kPublicDir));
  FM_RETURN_IF_ERROR(MakeDir(dir, fs::perms::owner_all));
  FM_ASSIGN_OR_RETURN(Identity agg, Identity::Generate(p.aggregator_name));
  FM_RETURN_IF_ERROR(WriteIdentity((dir / p.aggregator_name).string(), agg));
  FM_RETURN_IF_ERROR(MakeDir(dir / "allow", kPublicDir));
  FM_RETURN_IF_ERROR(MakeDir(dir / "state", fs::perms::owner_all));
  // Every site's key first: each site kit trusts all of them for secure aggregation.
  std::vector<Identity> ids;
  std::vector<fs::path> pubs;
  const fs::path staging = kits / ".keys";
  FM_RETURN_IF_ERROR(MakeDir(staging, fs::perms::owner_all));
  for (const ProjectSite& s : p.sites) {
    FM_ASSIGN_OR_RETURN(Identity id, Identity::Generate(s.name));
    FM_RETURN_IF_ERROR(WriteIdentity((staging / s.name).string(), id));
    fs::remove(staging / (s.name + ".key"));  // only the public half is staged
    pubs.push_back(staging / (s.name + ".pub"));
    fs::copy_file(pubs.back(), dir / "allow" / (s.name + ".pub"));
    ids.push_back(std::move(id));
  }
  toml::table root{
      {"federation", toml::table{{"id", p.federation_id}}},
      {"aggregator", toml::table{{"listen", p.listen},
                                 {"key", p.aggregator_name + ".key"},
                                 {"allow", "allow"},
                                 {"db", "state/aggregator.db"},
                                 {"metrics", "state/aggregator-metrics.jsonl"}}},
  };
  // Admin keys live apart from site keys: their own folders, their own socket.
  std::vector<Identity> admin_ids;
  if (!p.admin_address.empty()) {
    FM_RETURN_IF_ERROR(MakeDir(dir / "admins", kPublicDir));
    FM_RETURN_IF_ERROR(MakeDir(dir / "observers", kPublicDir));
    root.insert_or_assign("admin", toml::table{{"listen", p.admin_listen},
                                               {"admins", "admins"},
                                               {"observers", "observers"}});
    for (const ProjectAdmin& a : p.admins) {
      FM_ASSIGN_OR_RETURN(Identity id, Identity::Generate(a.name));
      FM_RETURN_IF_ERROR(WriteIdentity((staging / a.name).string(), id));
      fs::remove(staging / (a.name + ".key"));
      fs::copy_file(staging / (a.name + ".pub"),
                    dir / (a.role == "admin" ? "admins" : "observers") / (a.name + ".pub"));
      admin_ids.push_back(std::move(id));
    }
  }
  Merge(root, p.aggregator_config);
  FM_RETURN_IF_ERROR(WriteText(dir / "aggregator.toml",
                               "# Aggregator of federation " + p.federation_id + ": made by fedmesh-provision from " +
                                   fs::path(p.path).filename().string() + ". Every key: docs/config.md.\n" +
                                   Toml(root)));
  if (auto c = LoadAggregatorConfig((dir / "aggregator.toml").string(), {}); !c.ok())
    return c.status().WithContext("the aggregator config made from " + p.path);
  FM_RETURN_IF_ERROR(WriteText(
      dir / ("fedmesh-" + p.aggregator_name + ".service"),
      Unit(p, p.aggregator_name, "fedmesh-aggregator", "aggregator.toml",
           " --set aggregator.db=/var/lib/fedmesh/" + p.aggregator_name +
               "/aggregator.db --set aggregator.metrics=/var/lib/fedmesh/" + p.aggregator_name + "/metrics.jsonl",
           "aggregator")));
  FM_RETURN_IF_ERROR(WriteText(
      dir / "README.md",
      Readme(p, p.aggregator_name, "aggregator", "fedmesh-aggregator --config aggregator.toml",
             "It listens on `" + p.listen + "` (sites dial `" + p.address + "`) and admits the sites whose "
             "public keys are in `allow/`. A new site: `fedmesh-provision add-site NAME` (or `enrol "
             "NAME.pub`) puts its key there; then send this process SIGHUP (`kill -HUP`, or `systemctl "
             "reload`) to admit it without a restart.\n")));
  for (size_t i = 0; i < p.sites.size(); ++i) {
    FM_RETURN_IF_ERROR(WriteSiteKit(p, kits, p.sites[i].name, p.sites[i].organisation, p.sites[i].config, pubs,
                                    &ids[i], {}));
  }
  for (size_t i = 0; i < p.admins.size(); ++i) {
    FM_RETURN_IF_ERROR(WriteAdminKit(p, kits, p.admins[i], admin_ids[i]));
  }
  std::error_code ec;
  fs::remove_all(staging, ec);
  return Status::OK();
}

}  // namespace

Status WriteKits(const ProjectConfig& p, const std::string& out_dir) {
  const fs::path kits(out_dir);
  std::vector<fs::path> made = {kits / p.aggregator_name};
  for (const ProjectSite& s : p.sites) made.push_back(kits / s.name);
  for (const ProjectAdmin& a : p.admins) made.push_back(kits / a.name);
  for (const fs::path& dir : made)
    if (fs::exists(dir))
      return Status::AlreadyExists("kit " + dir.string() + " exists; kits are never overwritten");
  const bool made_kits = !fs::exists(kits);
  Status s;
  try {
    s = WriteNewKits(p, kits);
  } catch (const fs::filesystem_error& e) {
    s = Status::IOError(e.what());
  }
  if (!s.ok()) {
    // A half-made kit would block the next run (kits are never overwritten): remove every
    // folder this run made. None of them existed before it.
    std::error_code ec;
    for (const fs::path& dir : made) fs::remove_all(dir, ec);
    fs::remove_all(kits / ".keys", ec);
    if (made_kits) fs::remove(kits, ec);  // only when empty
  }
  return s;
}

Status AddSite(const ProjectConfig& p, const std::string& kits_dir, const std::string& name,
               const std::string& organisation, const std::string& public_key_path) {
  FM_RETURN_IF_ERROR(ValidateSiteName(name));
  const fs::path kits(kits_dir);
  if (name == p.aggregator_name) return Status::InvalidArgument("\"" + name + "\" is the aggregator's name");
  for (const ProjectSite& s : p.sites)
    if (s.name == name) return Status::InvalidArgument("site \"" + name + "\" is already in " + p.path);
  const fs::path agg_allow = kits / p.aggregator_name / "allow";
  if (!fs::is_directory(agg_allow))
    return Status::NotFound(agg_allow.string() + " is not there: run fedmesh-provision on the project first");
  std::optional<Identity> id;
  fs::path pub = public_key_path;
  const fs::path staging = kits / (".new-" + name);
  if (public_key_path.empty()) {
    FM_ASSIGN_OR_RETURN(Identity made, Identity::Generate(name));
    id.emplace(std::move(made));
  } else {
    FM_ASSIGN_OR_RETURN(PublicIdentity given, ReadPublicIdentity(public_key_path));
    if (given.name != name)
      return Status::InvalidArgument(public_key_path + " is the key of \"" + given.name + "\", not of \"" + name + "\"");
  }
  std::vector<fs::path> pubs;
  for (const ProjectSite& s : p.sites) pubs.push_back(agg_allow / (s.name + ".pub"));
  if (id) {
    FM_RETURN_IF_ERROR(MakeDir(staging, fs::perms::owner_all));
    FM_RETURN_IF_ERROR(WriteIdentity((staging / name).string(), *id));
    fs::remove(staging / (name + ".key"));
    pub = staging / (name + ".pub");
  }
  pubs.push_back(pub);
  const bool existed = fs::exists(kits / name);
  Status s;
  try {
    s = WriteSiteKit(p, kits, name, organisation, toml::table{}, pubs, id ? &*id : nullptr, pub);
  } catch (const fs::filesystem_error& e) {
    s = Status::IOError(e.what());
  }
  if (!s.ok() && !existed) {
    std::error_code ec;
    fs::remove_all(kits / name, ec);  // no half-made kit blocks the next try
  }
  if (s.ok()) {
    // Trusted everywhere: the aggregator admits it at its next SIGHUP; the other sites'
    // secure aggregation allowlists take it at their next start.
    fs::copy_file(pub, agg_allow / (name + ".pub"), fs::copy_options::overwrite_existing);
    for (const ProjectSite& other : p.sites) {
      if (fs::is_directory(kits / other.name / "allow"))
        fs::copy_file(pub, kits / other.name / "allow" / (name + ".pub"), fs::copy_options::overwrite_existing);
    }
    std::ofstream project(p.path, std::ios::app);
    project << "\n[[site]]  # added by fedmesh-provision add-site\nname = \"" << name << "\"\n";
    if (!organisation.empty()) project << "organisation = " << toml::value<std::string>(organisation) << "\n";
    if (!project) s = Status::IOError("the kit is made, but " + p.path + " could not be updated");
  }
  std::error_code ec;
  fs::remove_all(staging, ec);
  return s;
}

}  // namespace fedmesh
