// docs/config.md is generated from the schemas of every binary that reads a config
// (fedmesh-node, fedmesh-aggregator, fedmesh-sim, fedmesh-admin's kit); these tests keep it in step, and keep
// the example experiment configs loadable.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "aggregator/aggregator_config.h"
#include "config/admin_kit_config.h"
#include "config/config_schema.h"
#include "node/node_config.h"
#include "sim/sim_config.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = FEDMESH_SOURCE_DIR;

std::vector<const ConfigSchema*> Schemas() {
  return {&NodeConfigSchema(), &AggregatorConfigSchema(), &SimConfigSchema(), &AdminKitConfigSchema()};
}

// To regenerate: FEDMESH_REGENERATE_CONFIG_DOCS=1 sim_tests --gtest_filter='ConfigDocs*'
TEST(ConfigDocs, UpToDate) {
  const fs::path path = kSource / "docs/config.md";
  std::string expected = RenderConfigDocsPage(Schemas());
  if (std::getenv("FEDMESH_REGENERATE_CONFIG_DOCS")) std::ofstream(path) << expected;
  std::ifstream in(path);
  std::stringstream actual;
  actual << in.rdbuf();
  EXPECT_EQ(actual.str(), expected)
      << path << " is out of date; replace it with the text below (or rerun with "
      << "FEDMESH_REGENERATE_CONFIG_DOCS=1):\n" << expected;
}

TEST(ConfigDocs, FileMentionsEveryKeyInItsSection) {
  std::ifstream in(kSource / "docs/config.md");
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string doc = buf.str();
  for (const ConfigSchema* schema : Schemas()) {
    size_t start = doc.find("\n## " + schema->name + "\n");
    ASSERT_NE(start, std::string::npos) << "docs/config.md has no section for " << schema->name;
    for (const ConfigKey& k : schema->keys) {
      size_t section = doc.find("### [" + k.section + "]", start);
      ASSERT_NE(section, std::string::npos) << schema->name << " " << k.Name();
      size_t next = doc.find("\n#", section + 1);
      size_t at = doc.find("| `" + k.key + "` |", section);
      EXPECT_TRUE(at != std::string::npos && at < next)
          << "docs/config.md does not document " << schema->name << " " << k.Name();
    }
  }
}

TEST(SimExamples, EveryExampleConfigLoads) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(kSource / "examples/sim")) {
    if (e.path().extension() != ".toml") continue;
    auto o = LoadSimConfig(e.path().string(), {});
    EXPECT_TRUE(o.ok()) << e.path() << ": " << o.status().ToString();
    ++n;
  }
  EXPECT_GE(n, 5);
}

}  // namespace
}  // namespace fedmesh
