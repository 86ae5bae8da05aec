// core/data/array_source: datasets from .npz archives and .npy pairs written here with the
// same encoder fedmesh uses for models (np.load reads them back, see core/npz.h), and the
// data-source names that reach them. Values are checked exactly; every bad input names the
// file and the array.
#include "core/data/array_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/data/data_source.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;

NpzArray Floats(std::string name, graph::Dims dims, std::vector<float> v) {
  return {std::move(name), graph::DType::kFloat32, std::move(dims), std::move(v), {}};
}
NpzArray Ints(std::string name, graph::Dims dims, std::vector<int64_t> v) {
  return {std::move(name), graph::DType::kInt64, std::move(dims), {}, std::move(v)};
}

class ArraySourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("array_source_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string Write(const std::string& name, const std::vector<NpzArray>& arrays) {
    const std::string path = (dir_ / name).string();
    EXPECT_TRUE(WriteNpzFile(path, arrays).ok());
    return path;
  }
  void ExpectError(const Status& s, StatusCode code, std::vector<std::string> fragments) {
    EXPECT_EQ(s.code(), code) << s.ToString();
    for (const std::string& f : fragments)
      EXPECT_NE(s.message().find(f), std::string::npos) << s.message() << " lacks " << f;
  }
  fs::path dir_;
};

TEST_F(ArraySourceTest, TableRowsAndLabels) {
  const std::string path =
      Write("site.npz", {Floats("x", {3, 2}, {1, 2, 3, 4, 5, 6}), Ints("y", {3}, {2, 0, 1})});
  DataSourceSpec spec;
  spec.train = "npz:" + path;
  Result<Dataset> ds = LoadDataSource(spec, DataSplit::kTrain);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->sample_shape, (std::vector<int>{2}));
  EXPECT_EQ(ds->features, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{2, 0, 1}));
  EXPECT_EQ(ds->num_classes, 3);
  spec.num_classes = 5;
  EXPECT_EQ(LoadDataSource(spec, DataSplit::kTrain)->num_classes, 5);
  // No test split of its own.
  ExpectError(LoadDataSource(spec, DataSplit::kTest).status(), StatusCode::kInvalidArgument,
              {"no built-in test split"});
}

TEST_F(ArraySourceTest, GreyImagesGetAChannelAndFloatLabelsMayBeIntegral) {
  std::vector<float> x(2 * 3 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * float(i);
  const std::string path = Write("img.npz", {Floats("x", {2, 3, 4}, x), Floats("y", {2}, {1, 0})});
  Result<Dataset> ds = ReadNpzDataset(path, {});
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->sample_shape, (std::vector<int>{3, 4, 1}));
  EXPECT_EQ(ds->features, x);
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{1, 0}));
}

TEST_F(ArraySourceTest, RegressionTargets) {
  const std::string path =
      Write("r.npz", {Floats("x", {2, 1}, {0.5f, -1}), Floats("y", {2, 2}, {1.5f, 2, -3, 4})});
  ArraySourceOptions o;
  o.regression = true;
  Result<Dataset> ds = ReadNpzDataset(path, o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->target_dim, 2);
  EXPECT_EQ(ds->targets, (std::vector<float>{1.5f, 2, -3, 4}));
}

TEST_F(ArraySourceTest, NpyPair) {
  const std::string x = (dir_ / "x.npy").string(), y = (dir_ / "y.npy").string();
  // An .npz member is an .npy file: cut them out of one-member archives' encoding.
  for (const auto& [path, a] : {std::pair{x, Floats("x", {2, 2}, {1, 2, 3, 4})},
                                std::pair{y, Ints("y", {2}, {0, 1})}}) {
    const std::string npz = EncodeNpz({a});
    // The stored member runs from the .npy magic to the central directory.
    const size_t start = npz.find("\x93NUMPY");
    const size_t end = npz.find("PK\x01\x02");
    ASSERT_NE(start, std::string::npos);
    ASSERT_NE(end, std::string::npos);
    const std::string npy = npz.substr(start, end - start);
    ASSERT_TRUE(DecodeNpy(npy, a.name).ok()) << DecodeNpy(npy, a.name).status().ToString();
    std::ofstream(path, std::ios::binary) << npy;
  }
  // A header with bytes after its dict, an unknown or repeated key, or a dtype with trailing
  // characters is refused, naming the array.
  {
    const std::string npz = EncodeNpz({Floats("x", {2, 2}, {1, 2, 3, 4})});
    const std::string npy = npz.substr(npz.find("\x93NUMPY"), npz.find("PK\x01\x02") - npz.find("\x93NUMPY"));
    auto with_header = [&](std::string h) {
      const size_t len = static_cast<uint8_t>(npy[8]) | (static_cast<uint8_t>(npy[9]) << 8);
      h.resize(len - 1, ' ');
      h += '\n';
      return npy.substr(0, 10) + h + npy.substr(10 + len);
    };
    const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
    ASSERT_TRUE(DecodeNpy(with_header(ok), "x").ok()) << DecodeNpy(with_header(ok), "x").status().ToString();
    for (const auto& [h, why] :
         {std::pair<std::string, std::string>{ok + " junk", "bytes after its dict"},
          {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", "unknown key 'x'"},
          {"{'descr': '<f4', 'shape': (2, 2), 'fortran_order': False, 'shape': (2, 2)}", "repeats key 'shape'"},
          {"{'descr': '<f4x', 'fortran_order': False, 'shape': (2, 2), }", "dtype '<f4x'"},
          {"['descr', '<f4']", "not a dict"}}) {
      ExpectError(DecodeNpy(with_header(h), "x").status(), StatusCode::kInvalidArgument, {"x", why});
    }
  }
  DataSourceSpec spec;
  spec.train = "npy:" + x + "," + y;
  Result<Dataset> ds = LoadDataSource(spec, DataSplit::kTrain);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->features, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 1}));
  spec.train = "npy:" + x;
  ExpectError(LoadDataSource(spec, DataSplit::kTrain).status(), StatusCode::kInvalidArgument,
              {"npy:X_PATH,Y_PATH"});
}

TEST_F(ArraySourceTest, BadArraysNameTheFileAndTheArray) {
  ExpectError(ReadNpzDataset(Write("keys.npz", {Floats("features", {1, 1}, {1}),
                                                Ints("labels", {1}, {0})}),
                             {})
                  .status(),
              StatusCode::kInvalidArgument, {"keys.npz", "arrays named x and y", "features, labels"});
  ExpectError(ReadNpzDataset(Write("n.npz", {Floats("x", {2, 1}, {1, 2}), Ints("y", {3}, {0, 1, 1})}),
                             {})
                  .status(),
              StatusCode::kCorruption, {"n.npz", "array y has shape [3]", "holds 2 samples"});
  ExpectError(ReadNpzDataset(Write("nan.npz", {Floats("x", {2, 1}, {1, std::nanf("")}), Ints("y", {2}, {0, 1})}),
                             {})
                  .status(),
              StatusCode::kCorruption, {"nan.npz", "array x", "sample 1", "finite"});
  ExpectError(ReadNpzDataset(Write("neg.npz", {Floats("x", {2, 1}, {1, 2}), Ints("y", {2}, {0, -1})}),
                             {})
                  .status(),
              StatusCode::kCorruption, {"neg.npz", "array y", "sample 1", "class indices"});
  ExpectError(ReadNpzDataset(Write("frac.npz", {Floats("x", {1, 1}, {1}), Floats("y", {1}, {0.5f})}),
                             {})
                  .status(),
              StatusCode::kCorruption, {"frac.npz", "class indices"});
  ExpectError(ReadNpzDataset(Write("flat.npz", {Floats("x", {3}, {1, 2, 3}), Ints("y", {3}, {0, 1, 1})}),
                             {})
                  .status(),
              StatusCode::kCorruption, {"flat.npz", "[N, F]"});
  ExpectError(ReadNpzDataset(Write("empty.npz", {Floats("x", {0, 2}, {}), Ints("y", {0}, {})}), {})
                  .status(),
              StatusCode::kCorruption, {"empty.npz", "no samples"});
  ExpectError(ReadNpzDataset(Write("one.npz", {Floats("x", {2, 1}, {1, 2}), Ints("y", {2}, {1, 1})}), {})
                  .status(),
              StatusCode::kCorruption, {"one.npz", "single class"});
  ArraySourceOptions three;
  three.num_classes = 3;
  ExpectError(ReadNpzDataset(Write("big.npz", {Floats("x", {1, 1}, {1}), Ints("y", {1}, {3})}), three)
                  .status(),
              StatusCode::kCorruption, {"big.npz", ">= num_classes 3"});
  // Not an archive at all, and an empty file.
  std::ofstream(dir_ / "text.npz") << "x,y\n1,0\n";
  EXPECT_FALSE(ReadNpzDataset((dir_ / "text.npz").string(), {}).ok());
  std::ofstream(dir_ / "zero.npz");
  Status zero = ReadNpzDataset((dir_ / "zero.npz").string(), {}).status();
  EXPECT_FALSE(zero.ok());
  EXPECT_NE(zero.message().find("zero.npz"), std::string::npos) << zero.ToString();
  ExpectError(ReadNpzDataset((dir_ / "absent.npz").string(), {}).status(), StatusCode::kNotFound,
              {"absent.npz"});
}

// A source without a test split holds out test_fraction of each class, seeded: disjoint
// from the training rows, the same for the same seed, another for another seed.
TEST_F(ArraySourceTest, HeldOutSplitIsStratifiedSeededAndDisjoint) {
  const std::string path = (dir_ / "site.csv").string();
  {
    std::ofstream out(path);
    out << "id,y\n";
    for (int i = 0; i < 100; ++i) out << i << "," << (i < 80 ? 0 : 1) << "\n";
  }
  DataSourceSpec spec;
  spec.train = "csv:" + path;
  spec.label_column = "y";
  spec.test_fraction = 0.25;
  spec.split_seed = 7;
  Result<SiteData> a = LoadSiteData(spec);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->test.size(), 25u);
  ASSERT_EQ(a->train.size(), 75u);
  EXPECT_EQ(std::count(a->test.labels.begin(), a->test.labels.end(), 1), 5);  // 25% of 20
  std::set<float> ids(a->train.features.begin(), a->train.features.end());
  for (float id : a->test.features) EXPECT_FALSE(ids.contains(id)) << "row " << id << " in both";
  EXPECT_EQ(ids.size(), 75u);
  Result<SiteData> again = LoadSiteData(spec);
  EXPECT_EQ(again->test.features, a->test.features);
  spec.split_seed = 8;
  EXPECT_NE(LoadSiteData(spec)->test.features, a->test.features);
  spec.test_fraction = 0;
  Result<SiteData> none = LoadSiteData(spec);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->train.size(), 100u);
  EXPECT_EQ(none->test.size(), 0u);
  spec.test_fraction = 1.0;
  EXPECT_EQ(LoadSiteData(spec).status().code(), StatusCode::kInvalidArgument);
  spec.test_fraction = 0.001;  // rounds to no row of either class
  Status tiny = LoadSiteData(spec).status();
  EXPECT_NE(tiny.message().find("no test rows"), std::string::npos) << tiny.ToString();
}

TEST(DataSourceNames, UnknownSourceListsTheKnownOnes) {
  DataSourceSpec spec;
  spec.train = "parquet:x";
  Status s = LoadDataSource(spec, DataSplit::kTrain).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("npz:PATH"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("images:DIR"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace fedmesh
