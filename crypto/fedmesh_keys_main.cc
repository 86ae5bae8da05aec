// fedmesh-keys: creates and inspects site identities (crypto/identity.h) and their key
// files (crypto/key_files.h), and checks an allowlist directory the way the aggregator
// reads it.
//   fedmesh-keys gen --out DIR/NAME [--name NAME]   writes DIR/NAME.key (0600) + .pub (0644)
//   fedmesh-keys pub FILE                           prints the Z85 CurveZMQ public key
//   fedmesh-keys show FILE                          prints name and both public keys
//   fedmesh-keys allowlist DIR                      lists the sites DIR/*.pub enroll
// Data goes to stdout, one error sentence to stderr. No secret is ever printed.
//
// Exit codes: 0 success; 2 bad input (flags, a missing, malformed or too-open key file, a
// gen that would overwrite); 1 any other failure (I/O, libsodium).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

#include "core/exit_code.h"
#include "crypto/identity.h"
#include "crypto/key_files.h"

namespace {

namespace fs = std::filesystem;
using fedmesh::Result;
using fedmesh::Status;
using fedmesh::StatusCode;

using fedmesh::ExitCodeFor;
using fedmesh::kExitBadInput;
using fedmesh::kExitOk;
using fedmesh::kExitRuntime;

int Fail(const Status& s) {
  spdlog::error("{}", s.message());
  return ExitCodeFor(s);
}

// Creates the missing directories of `dir`, each mode 0700: it is about to hold a secret
// key, and nobody else needs to list it. Existing directories are left as they are.
Status MakeKeyDirectory(const fs::path& dir) {
  if (dir.empty()) return Status::OK();
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return Status::OK();
  if (fs::exists(dir, ec)) {
    return Status::InvalidArgument(dir.string() + " exists but is not a directory");
  }
  if (dir.has_parent_path() && dir.parent_path() != dir) {
    if (Status s = MakeKeyDirectory(dir.parent_path()); !s.ok()) return s;
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    const std::string why = std::error_code(errno, std::generic_category()).message();
    return Status::IOError("cannot create directory " + dir.string() + ": " + why);
  }
  return Status::OK();
}

int RunGen(std::string out, std::string name) {
  // Accept "--out keys/site-a.key" too: the user named the file they want.
  if (out.size() > 4 && (out.ends_with(".key") || out.ends_with(".pub"))) {
    out.resize(out.size() - 4);
  }
  const fs::path prefix(out);
  if (out.empty() || !prefix.has_filename()) {
    return Fail(Status::InvalidArgument("--out '" + out +
                                        "' must end in a file name, as in --out keys/site-a"));
  }
  if (name.empty()) {
    name = prefix.filename().string();
    if (Status s = fedmesh::ValidateSiteName(name); !s.ok()) {
      return Fail(Status::InvalidArgument(s.message() + "; pass --name to choose another name"));
    }
  }
  Result<fedmesh::Identity> id = fedmesh::Identity::Generate(name);
  if (!id.ok()) return Fail(id.status());
  const std::string key_path = fedmesh::SecretKeyPath(out);
  const std::string pub_path = fedmesh::PublicKeyPath(out);
  // Checked here as well as in WriteIdentity so that an existing pair is reported before
  // any directory is created.
  for (const std::string& p : {key_path, pub_path}) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(p, ec))) {
      return Fail(Status::AlreadyExists(p + " already exists; refusing to overwrite a key file "
                                            "(choose another --out or remove the old pair)"));
    }
  }
  if (Status s = MakeKeyDirectory(prefix.parent_path()); !s.ok()) return Fail(s);
  if (Status s = fedmesh::WriteIdentity(out, *id); !s.ok()) return Fail(s);
  std::printf("site:             %s\n", id->name().c_str());
  std::printf("secret key file:  %s (mode 0600; keep it on this host)\n", key_path.c_str());
  std::printf("public key file:  %s (give it to the federation operator)\n", pub_path.c_str());
  std::printf("curve public key: %s\n", id->public_identity().curve_public_z85().c_str());
  return kExitOk;
}

// The public half of FILE, a .key (permissions checked first) or a .pub.
Result<fedmesh::PublicIdentity> LoadPublic(const std::string& file) {
  FM_ASSIGN_OR_RETURN(fedmesh::KeyFileKind kind, fedmesh::DetectKeyFileKind(file));
  if (kind == fedmesh::KeyFileKind::kPublic) return fedmesh::ReadPublicIdentity(file);
  FM_ASSIGN_OR_RETURN(fedmesh::Identity id, fedmesh::ReadIdentity(file));
  return id.public_identity();
}

int RunPub(const std::string& file) {
  Result<fedmesh::PublicIdentity> pub = LoadPublic(file);
  if (!pub.ok()) return Fail(pub.status());
  std::printf("%s\n", pub->curve_public_z85().c_str());
  return kExitOk;
}

int RunShow(const std::string& file) {
  Result<fedmesh::PublicIdentity> pub = LoadPublic(file);
  if (!pub.ok()) return Fail(pub.status());
  std::printf("name:         %s\n", pub->name.c_str());
  std::printf("curve_public: %s\n", pub->curve_public_z85().c_str());
  std::printf("sign_public:  %s\n", pub->sign_public_z85().c_str());
  return kExitOk;
}

int RunAllowlist(const std::string& dir) {
  Result<std::vector<fedmesh::PublicIdentity>> ids = fedmesh::ReadAllowlist(dir);
  if (!ids.ok()) return Fail(ids.status());
  for (const fedmesh::PublicIdentity& id : *ids) {
    std::printf("%s %s\n", id.curve_public_z85().c_str(), id.name.c_str());
  }
  std::fprintf(stderr, "%zu site(s) enrolled in %s\n", ids->size(), dir.c_str());
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  // Errors go to stderr as "fedmesh-keys: error: <sentence>", stdout stays clean for data.
  auto logger = spdlog::stderr_color_mt("fedmesh-keys");
  logger->set_pattern("fedmesh-keys: %^%l%$: %v");
  spdlog::set_default_logger(logger);

  CLI::App app{"fedmesh-keys: creates and inspects fedmesh site identities (key files)."};
  app.set_version_flag("--version", "fedmesh-keys 0.1.0");
  app.require_subcommand(1);

  std::string gen_out, gen_name;
  CLI::App* gen = app.add_subcommand(
      "gen", "Generate an identity: writes DIR/NAME.key (secret, 0600) and DIR/NAME.pub");
  gen->add_option("--out", gen_out, "Path prefix DIR/NAME of the two files; DIR is created")
      ->required();
  gen->add_option("--name", gen_name, "Site name inside the files (default: NAME)");

  std::string pub_file;
  CLI::App* pub = app.add_subcommand("pub", "Print the Z85 CurveZMQ public key of a .key or .pub");
  pub->add_option("FILE", pub_file, "A .key or .pub file")->required();

  std::string show_file;
  CLI::App* show = app.add_subcommand("show", "Print the name and both public keys of a file");
  show->add_option("FILE", show_file, "A .key or .pub file")->required();

  std::string allow_dir;
  CLI::App* allow = app.add_subcommand(
      "allowlist", "Check an allowlist directory and list the sites its *.pub files enroll");
  allow->add_option("DIR", allow_dir, "Directory of .pub files")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitBadInput;
  }

  if (gen->parsed()) return RunGen(gen_out, gen_name);
  if (pub->parsed()) return RunPub(pub_file);
  if (show->parsed()) return RunShow(show_file);
  if (allow->parsed()) return RunAllowlist(allow_dir);
  return kExitBadInput;  // unreachable: require_subcommand(1)
}
