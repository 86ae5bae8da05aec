// Startup kits (docs/provisioning.md): one folder per participant of a project
// (provision/project.h) holding its key pair (secret 0600), the public keys it must trust,
// its config file (checked with the binary's own loader), a hardened systemd unit and a
// README with the one command that starts it. Kits are never overwritten: a key is made
// once. Thread-safety: file-system functions; one caller per kits folder.
#pragma once

#include <string>

#include "core/status.h"
#include "provision/project.h"

namespace fedmesh {

// Writes OUT/<aggregator>/ and OUT/<site>/ for every site of `project`. AlreadyExists
// when a kit folder exists; errors of the generated configs name the project file.
Status WriteKits(const ProjectConfig& project, const std::string& out);

// A kit for a new site NAME in KITS, and its public key added to the aggregator's
// allowlist (admitted at the aggregator's next SIGHUP) and to every site's [secagg] allow
// folder; the project file gains its [[site]]. With `public_key_path` (the site made its
// own key with fedmesh-keys gen), the kit holds only public keys: the private key never
// travels. InvalidArgument for a bad or taken name, or a public key of another name.
Status AddSite(const ProjectConfig& project, const std::string& kits, const std::string& name,
               const std::string& organisation, const std::string& public_key_path = "");

}  // namespace fedmesh
