// Tests of the TOML loader and schema with a schema of their own (every type, range,
// choice and path kind), independent of the binaries' configs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "config/config_loader.h"
#include "config/config_schema.h"
#include "tests/config/config_temp_dir.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using TempDir = testing_util::ConfigTempDir;

// A schema with every type, range, choice and path kind, independent of the real configs.
const ConfigSchema& TestSchema() {
  static const ConfigSchema* s = [] {
    auto* schema = new ConfigSchema;
    schema->name = "test";
    schema->keys = {
        RequiredKey("node", "id", ConfigType::kString, "the id"),
        StringKey("node", "key", "node.key", "key file").Path(),
        StringKey("node", "mode", "fast", "mode").Choices({"fast", "slow"}),
        StringKey("data", "dataset", "fashion-mnist", "data").Path(PathKind::kDataSource),
        IntKey("train", "epochs", 1, "epochs").Min(1).Max(100),
        FloatKey("train", "lr", 0.01, "learning rate").Min(0, true),
        FloatKey("train", "momentum", 0.0, "momentum").Min(0).Max(1, true),
        BoolKey("train", "verbose", false, "chatty"),
        StringListKey("train", "tags", {"a"}, "labels"),
    };
    return schema;
  }();
  return *s;
}

Status LoadError(const std::string& path, const std::vector<std::string>& sets = {"node.id=n"}) {
  auto r = LoadConfig(TestSchema(), path, sets);
  EXPECT_FALSE(r.ok()) << "expected an error";
  return r.status();
}

TEST(ConfigLoader, DefaultsWithoutFile) {
  auto r = LoadConfig(TestSchema(), "", {"node.id=n1"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->GetString("node", "id"), "n1");
  EXPECT_EQ(r->GetInt("train", "epochs"), 1);
  EXPECT_DOUBLE_EQ(r->GetFloat("train", "lr"), 0.01);
  EXPECT_FALSE(r->GetBool("train", "verbose"));
  EXPECT_EQ(r->GetStringList("train", "tags"), std::vector<std::string>{"a"});
  EXPECT_EQ(r->GetString("node", "key"), "node.key");  // no file: relative to the cwd
  EXPECT_FALSE(r->IsSet("train", "lr"));
  EXPECT_TRUE(r->IsSet("node", "id"));
  EXPECT_EQ(r->Origin("train", "lr"), "default");
}

TEST(ConfigLoader, FileValues) {
  TempDir dir;
  std::string path = dir.Write("c.toml", R"(
[node]
id = "site-1"
mode = "slow"
[train]
epochs = 5
lr = 1          # an integer is accepted for a float
verbose = true
tags = ["x", "y"]
)");
  auto r = LoadConfig(TestSchema(), path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->GetString("node", "id"), "site-1");
  EXPECT_EQ(r->GetString("node", "mode"), "slow");
  EXPECT_EQ(r->GetInt("train", "epochs"), 5);
  EXPECT_DOUBLE_EQ(r->GetFloat("train", "lr"), 1.0);
  EXPECT_TRUE(r->GetBool("train", "verbose"));
  EXPECT_EQ(r->GetStringList("train", "tags"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(r->Origin("train", "epochs"), path + ":6:10");
  EXPECT_DOUBLE_EQ(r->GetFloat("train", "momentum"), 0.0);  // untouched default
}

TEST(ConfigLoader, SetOverridesFileAndIsParsedAsTheKeysType) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[node]\nid = \"a\"\n[train]\nlr = 0.5\nepochs = 2\n");
  auto r = LoadConfig(TestSchema(), path,
                      {"train.lr=0.02", "train.verbose=true", "train.tags=p, q,r", "node.id=b",
                       "train.epochs=3", "train.epochs=4", "node.mode=slow"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->GetFloat("train", "lr"), 0.02);
  EXPECT_TRUE(r->GetBool("train", "verbose"));
  EXPECT_EQ(r->GetStringList("train", "tags"), (std::vector<std::string>{"p", "q", "r"}));
  EXPECT_EQ(r->GetString("node", "id"), "b");
  EXPECT_EQ(r->GetInt("train", "epochs"), 4);  // the later --set wins
  EXPECT_EQ(r->Origin("train", "lr"), "--set train.lr=0.02");

  auto empty = LoadConfig(TestSchema(), path, {"train.tags="});
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->GetStringList("train", "tags").empty());
}

TEST(ConfigLoader, MissingFileIsNotFound) {
  Status s = LoadError("/nonexistent/dir/agg.toml");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("config file '/nonexistent/dir/agg.toml' does not exist"));
}

TEST(ConfigLoader, SyntaxErrorGivesLineAndColumn) {
  TempDir dir;
  std::string path = dir.Write("bad.toml", "[node]\nid = \"a\"\n[train]\nlr = = 0.1\n");
  Status s = LoadError(path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(path + ":4:"));
  EXPECT_THAT(s.message(), HasSubstr("TOML syntax error"));
}

TEST(ConfigLoader, UnknownSectionSuggestsClosest) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[node]\nid = \"a\"\n\n[trian]\nlr = 0.1\n");
  Status s = LoadError(path);
  EXPECT_THAT(s.message(), HasSubstr(path + ":4:2: unknown section [trian] (did you mean [train]?)"));
}

TEST(ConfigLoader, UnknownKeySuggestsClosest) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[train]\nlrr = 0.1\n");
  Status s = LoadError(path);
  EXPECT_THAT(s.message(), HasSubstr(path + ":2:1: unknown key 'lrr' in [train] (did you mean 'lr'?)"));
}

TEST(ConfigLoader, KeyInWrongSectionNamesItsSection) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[node]\nepochs = 3\n");
  Status s = LoadError(path);
  EXPECT_THAT(s.message(), HasSubstr("unknown key 'epochs' in [node] (did you mean [train] epochs?"));

  std::string top = dir.Write("top.toml", "lr = 0.1\n");
  EXPECT_THAT(LoadError(top).message(),
              HasSubstr("key 'lr' is outside any section; did you mean to put it under [train]?"));
}

TEST(ConfigLoader, UnknownKeyFarFromAnyListsTheSectionsKeys) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[train]\nzzzzzzzz = 1\n");
  EXPECT_THAT(LoadError(path).message(),
              HasSubstr("known keys in [train]: epochs, lr, momentum, verbose, tags"));
}

TEST(ConfigLoader, WrongTypeSaysExpectedAndGot) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[train]\nlr = \"fast\"\n");
  EXPECT_THAT(LoadError(path).message(),
              HasSubstr(path + ":2:6: [train] lr: expected float, got string \"fast\""));

  std::string p2 = dir.Write("c2.toml", "[train]\nepochs = 1.5\n");
  EXPECT_THAT(LoadError(p2).message(), HasSubstr("[train] epochs: expected integer, got float 1.5"));

  std::string p3 = dir.Write("c3.toml", "[train]\ntags = [\"a\", 2]\n");
  EXPECT_THAT(LoadError(p3).message(),
              HasSubstr("[train] tags: expected list of strings, got an array whose element 1 is a "
                        "integer 2"));

  std::string p4 = dir.Write("c4.toml", "[train]\nverbose = \"yes\"\n");
  EXPECT_THAT(LoadError(p4).message(), HasSubstr("[train] verbose: expected boolean, got string"));
}

TEST(ConfigLoader, OutOfRangeAndChoices) {
  TempDir dir;
  EXPECT_THAT(LoadError(dir.Write("a.toml", "[train]\nepochs = 0\n")).message(),
              HasSubstr(":2:10: [train] epochs: must be in [1, 100], got 0"));
  EXPECT_THAT(LoadError(dir.Write("b.toml", "[train]\nlr = 0.0\n")).message(),
              HasSubstr("[train] lr: must be > 0.0, got 0.0"));
  EXPECT_THAT(LoadError(dir.Write("c.toml", "[train]\nmomentum = 1.0\n")).message(),
              HasSubstr("[train] momentum: must be in [0.0, 1.0), got 1.0"));
  EXPECT_THAT(LoadError(dir.Write("d.toml", "[train]\nlr = nan\n")).message(),
              HasSubstr("[train] lr: must be a finite number"));
  EXPECT_THAT(LoadError(dir.Write("e.toml", "[node]\nmode = \"medium\"\n")).message(),
              HasSubstr("[node] mode: must be one of \"fast\", \"slow\"; got \"medium\""));
}

TEST(ConfigLoader, MissingRequiredKey) {
  TempDir dir;
  std::string path = dir.Write("c.toml", "[train]\nlr = 0.1\n");
  auto r = LoadConfig(TestSchema(), path, {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr(path + ": missing required key [node] id (the id); add it under [node] or "
                               "pass --set node.id=..."));
}

TEST(ConfigLoader, MalformedSet) {
  EXPECT_THAT(LoadError("", {"train.lr"}).message(),
              HasSubstr("--set train.lr: expected section.key=value (no '=' found)"));
  EXPECT_THAT(LoadError("", {"lr=0.1"}).message(),
              HasSubstr("--set lr=0.1: the key 'lr' needs its section; did you mean --set "
                        "train.lr=0.1?"));
  EXPECT_THAT(LoadError("", {"=3"}).message(), HasSubstr("needs its section"));
  EXPECT_THAT(LoadError("", {"trian.lr=1"}).message(),
              HasSubstr("--set trian.lr=1: unknown section [trian] (did you mean [train]?)"));
  EXPECT_THAT(LoadError("", {"train.lrr=1"}).message(),
              HasSubstr("--set train.lrr=1: unknown key 'lrr' in [train] (did you mean 'lr'?)"));
  EXPECT_THAT(LoadError("", {"node.id=n", "train.lr=abc"}).message(),
              HasSubstr("--set train.lr=abc: [train] lr: expected float, got 'abc'"));
  EXPECT_THAT(LoadError("", {"node.id=n", "train.epochs=2x"}).message(),
              HasSubstr("[train] epochs: expected integer, got '2x'"));
  EXPECT_THAT(LoadError("", {"node.id=n", "train.verbose=yes"}).message(),
              HasSubstr("[train] verbose: expected boolean (true or false), got 'yes'"));
  EXPECT_THAT(LoadError("", {"node.id=n", "train.epochs=500"}).message(),
              HasSubstr("--set train.epochs=500: [train] epochs: must be in [1, 100], got 500"));
}

TEST(ConfigLoader, RelativePathsResolveAgainstTheConfigFilesDirectory) {
  TempDir dir;
  std::string path = dir.Write("site/c.toml", R"(
[node]
id = "a"
key = "keys/a.key"
[data]
dataset = "csv:data/train.csv"
)");
  const fs::path base = dir.path() / "site";
  auto r = LoadConfig(TestSchema(), path, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->GetString("node", "key"), (base / "keys/a.key").string());
  EXPECT_EQ(r->GetString("data", "dataset"), "csv:" + (base / "data/train.csv").string());

  // Defaults follow the file too; named data sources and absolute paths are kept.
  std::string p2 = dir.Write("site/d.toml", "[node]\nid = \"a\"\n");
  auto d = LoadConfig(TestSchema(), p2, {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->GetString("node", "key"), (base / "node.key").string());
  EXPECT_EQ(d->GetString("data", "dataset"), "fashion-mnist");

  // --set values are command-line paths: relative to the working directory, kept as typed.
  auto s = LoadConfig(TestSchema(), path, {"node.key=mine.key", "data.dataset=csv:/abs/x.csv"});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->GetString("node", "key"), "mine.key");
  EXPECT_EQ(s->GetString("data", "dataset"), "csv:/abs/x.csv");
}

TEST(ConfigSchema, EditDistanceAndRangeText) {
  EXPECT_EQ(EditDistance("lr", "lr"), 0u);
  EXPECT_EQ(EditDistance("lrr", "lr"), 1u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(TestSchema().Find("train", "momentum")->RangeText(), "in [0.0, 1.0)");
  EXPECT_EQ(TestSchema().Find("train", "lr")->RangeText(), "> 0.0");
  EXPECT_EQ(FormatDefault(*TestSchema().Find("train", "tags")), "[\"a\"]");
  EXPECT_EQ(FormatDefault(*TestSchema().Find("node", "id")), "(required)");
}

}  // namespace
}  // namespace fedmesh
