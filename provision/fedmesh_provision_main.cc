// fedmesh-provision: startup kits for a federation from one project file
// (docs/provisioning.md).
//   fedmesh-provision project.toml --out kits/            one kit per participant
//   fedmesh-provision add-site NAME --project P --kits K  a new site: key, kit, allowlists
//   fedmesh-provision enrol NAME.pub --project P --kits K the same with the site's own key
// Exit codes: 0 done, 2 bad input (project file, names, existing kits), 1 other failures.
#include <cstdio>
#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "crypto/key_files.h"
#include "provision/kit_writer.h"
#include "provision/project.h"

namespace {

int Fail(const fedmesh::Status& s) {
  std::fprintf(stderr, "fedmesh-provision: %s\n", s.message().c_str());
  switch (s.code()) {
    case fedmesh::StatusCode::kInvalidArgument:
    case fedmesh::StatusCode::kNotFound:
    case fedmesh::StatusCode::kAlreadyExists:
    case fedmesh::StatusCode::kPermissionDenied:
    case fedmesh::StatusCode::kCorruption:
      return 2;
    default:
      return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fedmesh-provision: startup kits (keys, configs, systemd units, READMEs) for a federation"};
  std::string project_path, out;
  app.add_option("project", project_path, "the project file (docs/provisioning.md)");
  app.add_option("--out", out, "folder to write one kit per participant into");
  std::string name, organisation, kits, pub;
  CLI::App* add = app.add_subcommand("add-site", "a kit for a new site, admitted at the aggregator's next SIGHUP");
  add->add_option("name", name, "the new site's name")->required();
  add->add_option("--project", project_path, "the project file")->required();
  add->add_option("--kits", kits, "the kits folder")->required();
  add->add_option("--organisation", organisation, "the site's organisation (for its README)");
  CLI::App* enrol = app.add_subcommand("enrol", "the same for a site that made its own key (fedmesh-keys gen)");
  enrol->add_option("public_key", pub, "the site's NAME.pub")->required()->check(CLI::ExistingFile);
  enrol->add_option("--project", project_path, "the project file")->required();
  enrol->add_option("--kits", kits, "the kits folder")->required();
  enrol->add_option("--organisation", organisation, "the site's organisation (for its README)");
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (project_path.empty()) return Fail(fedmesh::Status::InvalidArgument("name the project file"));
  auto project = fedmesh::LoadProject(project_path);
  if (!project.ok()) return Fail(project.status());
  if (add->parsed() || enrol->parsed()) {
    if (enrol->parsed()) {
      auto who = fedmesh::ReadPublicIdentity(pub);
      if (!who.ok()) return Fail(who.status());
      name = who->name;
    }
    fedmesh::Status s = fedmesh::AddSite(*project, kits, name, organisation, pub);
    if (!s.ok()) return Fail(s);
    std::printf("kit %s/%s made; its key is in %s/%s/allow/ and in the sites' allow/ folders.\n"
                "Send the aggregator SIGHUP (kill -HUP <pid>, or systemctl reload) to admit it.\n",
                kits.c_str(), name.c_str(), kits.c_str(), project->aggregator_name.c_str());
    return 0;
  }
  if (out.empty()) return Fail(fedmesh::Status::InvalidArgument("--out: name the folder for the kits"));
  if (fedmesh::Status s = fedmesh::WriteKits(*project, out); !s.ok()) return Fail(s);
  std::printf("%zu kit(s) in %s: %s", project->sites.size() + project->admins.size() + 1, out.c_str(),
              project->aggregator_name.c_str());
  for (const auto& site : project->sites) std::printf(", %s", site.name.c_str());
  for (const auto& admin : project->admins) std::printf(", %s (%s)", admin.name.c_str(), admin.role.c_str());
  std::printf("\nEach kit's README.md says how to start it.\n");
  return 0;
}
