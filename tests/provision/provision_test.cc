// fedmesh-provision's project file and kits (provision/): bad project files are refused
// naming file, line and key; kits hold what they must, with the right modes, configs that
// the binaries' loaders accept, and are never overwritten; add-site and enrol extend a
// federation's allowlists.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "aggregator/aggregator_config.h"
#include "config/admin_kit_config.h"
#include "crypto/identity.h"
#include "crypto/key_files.h"
#include "node/node_config.h"
#include "provision/kit_writer.h"
#include "provision/project.h"
#include "tests/config/config_temp_dir.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using TempDir = testing_util::ConfigTempDir;

constexpr char kProject[] = R"(
[federation]
id = "hospitals"

[aggregator]
address = "tcp://agg.example.org:5555"
listen = "tcp://0.0.0.0:5555"

[aggregator.config.rounds]
total = 7
min_clients = 2

[site_defaults.config.train]
threads = 1

[[site]]
name = "general"
organisation = "General Hospital"
[site.config.data]
num_partitions = 2
index = 0

[[site]]
name = "st-mary"
[site.config.data]
num_partitions = 2
index = 1
)";

unsigned Mode(const fs::path& p) {
  struct stat st{};
  ::stat(p.c_str(), &st);
  return st.st_mode & 0777;
}

TEST(ProvisionTest, ProjectErrorsNameFileLineAndKey) {
  TempDir dir;
  struct Case {
    std::string body;
    std::string expect;
  };
  const Case cases[] = {
      {"[federation]\n", "[federation] id is required"},
      {"[federation]\nid = \"f\"\n", "[aggregator] address is required"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"agg:5555\"\n", "project.toml:4: [aggregator] address"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n[[site]]\nname = \"bad name\"\n",
       "project.toml:6: [[site]] name"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n[[site]]\nname = \"a\"\n[[site]]\nname = \"a\"\n",
       "\"a\" is used twice"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n[[site]]\nname = \"aggregator\"\n",
       "is used twice"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n[admins]\n", "project.toml:5: [admins]: unknown section"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n[[admin]]\nname = \"alice\"\n",
       "[aggregator] admin_address (tcp://HOST:PORT, what admins dial) is required"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\nadmin_address = \"tcp://a:2\"\n"
       "[[admin]]\nname = \"alice\"\nrole = \"root\"\n",
       "project.toml:8: [[admin]] role is \"root\"; it must be \"admin\" or \"observer\""},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\nadmin_address = \"tcp://a:2\"\n"
       "[[site]]\nname = \"alice\"\n[[admin]]\nname = \"alice\"\n",
       "project.toml:9: [[admin]] name \"alice\" is used twice"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\nadmin_address = \"tcp://a:2\"\n"
       "[[admin]]\nname = \"alice\"\nkey = \"x\"\n",
       "project.toml:8: [[admin]] key: unknown key (known: name, role)"},
      // Misspelt keys used to be dropped without a word (their defaults used instead).
      {"[federation]\nidd = \"f\"\n", "project.toml:2: [federation] idd: unknown key (did you mean 'id'? known: id)"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\nadress = \"tcp://b:1\"\n",
       "project.toml:5: [aggregator] adress: unknown key (did you mean 'address'? known: name, address, listen, "
       "admin_address, admin_listen, config)"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n[[site]]\nname = \"a\"\n"
       "organisaton = \"A\"\n",
       "project.toml:7: [[site]] organisaton: unknown key (did you mean 'organisation'?"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n[kits]\nbin_dirr = \"/opt\"\n",
       "project.toml:6: [kits] bin_dirr: unknown key (did you mean 'bin_dir'?"},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n[site_defaults]\nthreads = 2\n",
       "project.toml:6: [site_defaults] threads: unknown key (known: config)"},
      // A config table may repeat [federation] id, not change it: the kits would disagree.
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n[aggregator.config.federation]\n"
       "id = \"other\"\n",
       "project.toml:6: [aggregator.config.federation] id is \"other\", but [federation] id is \"f\""},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n[site_defaults.config.federation]\n"
       "id = \"g\"\n",
       "project.toml:6: [site_defaults.config.federation] id is \"g\", but [federation] id is \"f\""},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\n[[site]]\nname = \"a\"\n"
       "[site.config.federation]\nid = \"g\"\n",
       "project.toml:8: [site.config.federation] id is \"g\", but [federation] id is \"f\""},
      {"[federation]\nid = \"f\"\n[aggregator]\naddress = \"tcp://a:1\"\nadmin_address = \"a:2\"\n",
       "project.toml:5: [aggregator] admin_address is \"a:2\"; it must be tcp://HOST:PORT"},
      {"[federation]\nid = 3\n", "project.toml:2: [federation] id must be a non-empty string"},
      {"[federation\n", "TOML syntax error"},
  };
  for (const Case& c : cases) {
    auto p = LoadProject(dir.Write("project.toml", c.body));
    ASSERT_FALSE(p.ok()) << c.body;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(p.status().message(), HasSubstr(c.expect)) << c.body;
  }
}

// The same id repeated in a config table is no conflict.
TEST(ProvisionTest, ConfigMayRepeatTheFederationId) {
  TempDir dir;
  auto p = LoadProject(dir.Write("project.toml", std::string(kProject) +
                                                     "\n[aggregator.config.federation]\nid = \"hospitals\"\n"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->federation_id, "hospitals");
}

// A run that fails half-way (here: a config key the aggregator's or a site's loader
// refuses, found after that kit's keys were written) leaves no kit behind, so the next
// run, with the project fixed, is not refused for kits that "exist".
TEST(ProvisionTest, AFailedRunLeavesNoPartialKit) {
  TempDir dir;
  const fs::path kits = fs::path(dir.path()) / "kits";
  std::string bad_agg = kProject;
  bad_agg.insert(bad_agg.find("min_clients = 2\n") + 16, "bogus = 1\n");
  auto p = LoadProject(dir.Write("project.toml", bad_agg));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Status s = WriteKits(*p, kits.string());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("bogus"));
  EXPECT_FALSE(fs::exists(kits / "aggregator"));
  EXPECT_FALSE(fs::exists(kits)) << "the kits folder was made by the failed run";

  // The second site's config is refused after the aggregator's and the first site's kits
  // were complete; the kits folder existed before, with a file of someone else's.
  fs::create_directories(kits);
  std::ofstream(kits / "notes.txt") << "keep me";
  std::string bad_site = kProject;
  bad_site.insert(bad_site.find("index = 1\n") + 10, "bogus = 1\n");
  p = LoadProject(dir.Write("project.toml", bad_site));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  s = WriteKits(*p, kits.string());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("st-mary"));
  for (const char* kit : {"aggregator", "general", "st-mary", ".keys"}) EXPECT_FALSE(fs::exists(kits / kit)) << kit;
  EXPECT_TRUE(fs::exists(kits / "notes.txt"));

  p = LoadProject(dir.Write("project.toml", kProject));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  s = WriteKits(*p, kits.string());
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(fs::exists(kits / "st-mary" / "site.toml"));
}

TEST(ProvisionTest, KitsHoldKeysConfigsUnitsAndReadmes) {
  TempDir dir;
  auto p = LoadProject(dir.Write("project.toml", kProject));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->sites.size(), 2u);
  const fs::path kits = fs::path(dir.path()) / "kits";
  ASSERT_TRUE(WriteKits(*p, kits.string()).ok());
  // The aggregator: its key, every site's public key, a config its own loader accepts.
  const fs::path agg = kits / "aggregator";
  EXPECT_EQ(Mode(agg / "aggregator.key"), 0600u);
  EXPECT_EQ(Mode(agg / "allow"), 0755u);
  EXPECT_TRUE(fs::exists(agg / "allow" / "general.pub"));
  EXPECT_TRUE(fs::exists(agg / "allow" / "st-mary.pub"));
  EXPECT_FALSE(fs::exists(kits / ".keys")) << "no staging left behind";
  auto ac = LoadAggregatorConfig((agg / "aggregator.toml").string(), {});
  ASSERT_TRUE(ac.ok()) << ac.status().ToString();
  EXPECT_EQ(ac->federation_id, "hospitals");
  EXPECT_EQ(ac->listen, "tcp://0.0.0.0:5555");
  EXPECT_EQ(ac->rounds.total_rounds, 7u);
  EXPECT_EQ(ac->rounds.min_clients, 2);
  auto agg_key = ReadIdentity((agg / "aggregator.key").string());
  ASSERT_TRUE(agg_key.ok());
  // A site: its own secret key only, the aggregator's public key, the project's keys.
  const fs::path site = kits / "general";
  EXPECT_EQ(Mode(site / "general.key"), 0600u);
  EXPECT_FALSE(fs::exists(site / "st-mary.key"));
  EXPECT_FALSE(fs::exists(site / "aggregator.key"));
  auto pub = ReadPublicIdentity((site / "aggregator.pub").string());
  ASSERT_TRUE(pub.ok());
  EXPECT_EQ(pub->curve_public, agg_key->public_identity().curve_public);
  auto nc = LoadNodeConfig((site / "site.toml").string(), {});
  ASSERT_TRUE(nc.ok()) << nc.status().ToString();
  EXPECT_EQ(nc->node_id, "general");
  EXPECT_EQ(nc->aggregator_endpoint, "tcp://agg.example.org:5555");
  EXPECT_EQ(nc->training.partition.num_partitions, 2);
  EXPECT_EQ(nc->training.index, 0);
  EXPECT_EQ(nc->training.threads, 1);  // site_defaults
  EXPECT_TRUE(fs::exists(site / "allow" / "st-mary.pub"));
  std::ifstream readme(site / "README.md");
  std::string text((std::istreambuf_iterator<char>(readme)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("```sh\nfedmesh-node --config site.toml\n```"));
  EXPECT_THAT(text, HasSubstr("General Hospital"));
  std::ifstream unit(site / "fedmesh-general.service");
  std::string u((std::istreambuf_iterator<char>(unit)), std::istreambuf_iterator<char>());
  for (const char* line : {"ExecStart=/usr/bin/fedmesh-node --config /etc/fedmesh/general/site.toml",
                           "User=fedmesh", "ProtectSystem=strict", "NoNewPrivileges=true", "PrivateTmp=true",
                           "StateDirectory=fedmesh/general", "Restart=on-failure"}) {
    EXPECT_THAT(u, HasSubstr(line));
  }
  // Never overwritten: a second run refuses and changes nothing.
  const auto key_time = fs::last_write_time(site / "general.key");
  auto again = WriteKits(*p, kits.string());
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(fs::last_write_time(site / "general.key"), key_time);
}

// Admin kits: keys apart from the sites', by role, and an admin.toml fedmesh-admin reads.
TEST(ProvisionTest, AdminKitsKeepAdminKeysApartByRole) {
  TempDir dir;
  std::string project = kProject;
  project.insert(project.find("listen = \"tcp://0.0.0.0:5555\"\n") + 30,
                 "admin_address = \"tcp://agg.example.org:5556\"\nadmin_listen = \"tcp://0.0.0.0:5556\"\n");
  project += "\n[[admin]]\nname = \"alice\"\n\n[[admin]]\nname = \"bob\"\nrole = \"observer\"\n";
  auto p = LoadProject(dir.Write("project.toml", project));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->admins.size(), 2u);
  const fs::path kits = fs::path(dir.path()) / "kits";
  ASSERT_TRUE(WriteKits(*p, kits.string()).ok());
  const fs::path agg = kits / "aggregator";
  EXPECT_TRUE(fs::exists(agg / "admins" / "alice.pub"));
  EXPECT_TRUE(fs::exists(agg / "observers" / "bob.pub"));
  EXPECT_FALSE(fs::exists(agg / "allow" / "alice.pub")) << "an admin key is not a site key";
  EXPECT_FALSE(fs::exists(agg / "admins" / "bob.pub"));
  auto ac = LoadAggregatorConfig((agg / "aggregator.toml").string(), {});
  ASSERT_TRUE(ac.ok()) << ac.status().ToString();
  EXPECT_EQ(ac->admin_listen, "tcp://0.0.0.0:5556");
  EXPECT_EQ(ac->admin_dir, (agg / "admins").string());
  EXPECT_EQ(ac->observer_dir, (agg / "observers").string());
  auto kit = LoadAdminKitConfig((kits / "alice" / "admin.toml").string());
  ASSERT_TRUE(kit.ok()) << kit.status().ToString();
  EXPECT_EQ(kit->name, "alice");
  EXPECT_EQ(kit->endpoint, "tcp://agg.example.org:5556");
  EXPECT_EQ(Mode(kits / "alice" / "alice.key"), 0600u);
  auto alice = ReadIdentity(kit->key_path);
  ASSERT_TRUE(alice.ok());
  auto listed = ReadPublicIdentity((agg / "admins" / "alice.pub").string());
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->curve_public, alice->public_identity().curve_public);
  auto server = ReadPublicIdentity(kit->server_key);
  auto agg_key = ReadIdentity((agg / "aggregator.key").string());
  ASSERT_TRUE(server.ok() && agg_key.ok());
  EXPECT_EQ(server->curve_public, agg_key->public_identity().curve_public);
  EXPECT_FALSE(fs::exists(kits / "alice" / "bob.key"));
  std::ifstream readme(kits / "bob" / "README.md");
  std::string text((std::istreambuf_iterator<char>(readme)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("```sh\nfedmesh-admin --kit . status\n```"));
  EXPECT_THAT(text, HasSubstr("observer"));
}

TEST(ProvisionTest, AddSiteAndEnrolExtendTheAllowlists) {
  TempDir dir;
  const std::string project = dir.Write("project.toml", kProject);
  auto p = LoadProject(project);
  ASSERT_TRUE(p.ok());
  const fs::path kits = fs::path(dir.path()) / "kits";
  ASSERT_TRUE(WriteKits(*p, kits.string()).ok());
  ASSERT_TRUE(AddSite(*p, kits.string(), "clinic", "Clinic").ok());
  EXPECT_TRUE(fs::exists(kits / "clinic" / "clinic.key"));
  EXPECT_TRUE(fs::exists(kits / "aggregator" / "allow" / "clinic.pub"));
  EXPECT_TRUE(fs::exists(kits / "general" / "allow" / "clinic.pub"));
  auto reread = LoadProject(project);
  ASSERT_TRUE(reread.ok()) << reread.status().ToString();
  ASSERT_EQ(reread->sites.size(), 3u);
  EXPECT_EQ(reread->sites[2].name, "clinic");
  EXPECT_EQ(reread->sites[2].organisation, "Clinic");
  EXPECT_THAT(AddSite(*reread, kits.string(), "clinic", "").message(), HasSubstr("already in"));
  // enrol: the site made its own key; the kit gets only the public half.
  auto own = Identity::Generate("lab");
  ASSERT_TRUE(own.ok());
  const std::string prefix = (dir.path() / "lab-own" / "lab").string();
  fs::create_directories(dir.path() / "lab-own");
  ASSERT_TRUE(WriteIdentity(prefix, *own).ok());
  ASSERT_TRUE(AddSite(*reread, kits.string(), "lab", "", PublicKeyPath(prefix)).ok());
  EXPECT_FALSE(fs::exists(kits / "lab" / "lab.key"));
  auto admitted = ReadPublicIdentity((kits / "aggregator" / "allow" / "lab.pub").string());
  ASSERT_TRUE(admitted.ok());
  EXPECT_EQ(admitted->curve_public, own->public_identity().curve_public);
  EXPECT_THAT(AddSite(*reread, kits.string(), "other", "", PublicKeyPath(prefix)).message(),
              HasSubstr("is the key of \"lab\", not of \"other\""));
}

}  // namespace
}  // namespace fedmesh
