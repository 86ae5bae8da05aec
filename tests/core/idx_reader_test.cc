// Tests for core/data/idx_reader and core/data/fashion_mnist: exact round trips through
// small IDX files written here (gzip and plain), every corruption the reader must reject,
// and the real Fashion-MNIST files when installed (skipped with a reason otherwise).
#include "core/data/idx_reader.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/data/fashion_mnist.h"

namespace fedmesh {
namespace {

using Bytes = std::vector<uint8_t>;

// An IDX file: 0, 0, type code, ndims, big-endian dims, then the payload.
Bytes MakeIdx(uint8_t type_code, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b = {0, 0, type_code, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    b.push_back(static_cast<uint8_t>(d >> 24));
    b.push_back(static_cast<uint8_t>(d >> 16));
    b.push_back(static_cast<uint8_t>(d >> 8));
    b.push_back(static_cast<uint8_t>(d));
  }
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

void WriteGz(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

void WritePlain(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

Bytes ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Checks the code and that the message contains every fragment (the path, a keyword).
void ExpectError(const Status& s, StatusCode code, std::initializer_list<std::string> fragments) {
  EXPECT_EQ(s.code(), code) << "expected " << StatusCodeName(code) << ", got " << s.ToString();
  for (const std::string& f : fragments) {
    EXPECT_NE(s.message().find(f), std::string::npos)
        << "message \"" << s.message() << "\" lacks \"" << f << "\"";
  }
}

class IdxReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/idx_reader_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // Three 2x3 images and their labels, written gzip-compressed.
  void WriteSmallPair(const std::string& images, const std::string& labels) {
    WriteGz(images, MakeIdx(0x08, {3, 2, 3}, image_bytes_));
    WriteGz(labels, MakeIdx(0x08, {3}, {0, 2, 1}));
  }

  std::string dir_;
  const Bytes image_bytes_ = {0,   1,   2,   127, 128, 255,  //
                              10,  20,  30,  40,  50,  60,   //
                              255, 254, 253, 3,   2,   1};
};

TEST_F(IdxReaderTest, GzipRoundTripIsExact) {
  const std::string images = Path("img.gz"), labels = Path("lbl.gz");
  WriteSmallPair(images, labels);
  Result<Dataset> ds = ReadIdxImagesAndLabels(images, labels, 3);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->sample_shape, (std::vector<int>{2, 3, 1}));
  EXPECT_EQ(ds->num_classes, 3);
  EXPECT_EQ(ds->size(), 3u);
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 2, 1}));
  ASSERT_EQ(ds->features.size(), image_bytes_.size());
  for (size_t i = 0; i < image_bytes_.size(); ++i) {
    EXPECT_EQ(ds->features[i], static_cast<float>(image_bytes_[i]) / 255.0f) << "element " << i;
  }
  EXPECT_EQ(ds->features[5], 1.0f);
  EXPECT_EQ(ds->features[0], 0.0f);
  // Sample 1 starts at its own six bytes (sample-major layout).
  EXPECT_EQ(ds->sample(1)[0], 10.0f / 255.0f);
}

TEST_F(IdxReaderTest, PlainUncompressedFilesAlsoWork) {
  const std::string images = Path("img.idx"), labels = Path("lbl.idx");
  WritePlain(images, MakeIdx(0x08, {3, 2, 3}, image_bytes_));
  WritePlain(labels, MakeIdx(0x08, {3}, {2, 2, 0}));
  Result<Dataset> ds = ReadIdxImagesAndLabels(images, labels, 3);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{2, 2, 0}));
  EXPECT_EQ(ds->features[4], 128.0f / 255.0f);
}

TEST_F(IdxReaderTest, ReadIdxUint8ReturnsDimsAndBytes) {
  const std::string path = Path("arr.gz");
  WriteGz(path, MakeIdx(0x08, {3, 2, 3}, image_bytes_));
  Result<IdxArray> arr = ReadIdxUint8(path, 3);
  ASSERT_TRUE(arr.ok()) << arr.status().ToString();
  EXPECT_EQ(arr->dims, (std::vector<uint32_t>{3, 2, 3}));
  EXPECT_EQ(arr->data, image_bytes_);
}

TEST_F(IdxReaderTest, LargeArrayCrossesReadChunksIntact) {
  // 20 MiB spans more than one of the reader's 16 MiB chunks.
  const uint32_t n = 20 << 20;
  Bytes payload(n);
  for (uint32_t i = 0; i < n; ++i) payload[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
  const std::string path = Path("big.gz");
  WriteGz(path, MakeIdx(0x08, {n}, payload));
  Result<IdxArray> arr = ReadIdxUint8(path, 1);
  ASSERT_TRUE(arr.ok()) << arr.status().ToString();
  ASSERT_EQ(arr->data.size(), payload.size());
  EXPECT_TRUE(arr->data == payload);
}

TEST_F(IdxReaderTest, MissingFileIsNotFoundWithPath) {
  const std::string images = Path("nope-images.gz");
  const std::string labels = Path("lbl.gz");
  WriteGz(labels, MakeIdx(0x08, {3}, {0, 1, 2}));
  ExpectError(ReadIdxImagesAndLabels(images, labels, 10).status(), StatusCode::kNotFound, {images});
  ExpectError(ReadIdxUint8(Path("absent"), 1).status(), StatusCode::kNotFound, {Path("absent")});
}

TEST_F(IdxReaderTest, DirectoryIsInvalidArgument) {
  ExpectError(ReadIdxUint8(dir_, 1).status(), StatusCode::kInvalidArgument, {dir_});
}

TEST_F(IdxReaderTest, WrongMagicIsCorruption) {
  const std::string path = Path("magic.gz");
  Bytes b = MakeIdx(0x08, {3}, {0, 1, 2});
  b[0] = 0x12;
  WriteGz(path, b);
  ExpectError(ReadIdxUint8(path, 1).status(), StatusCode::kCorruption, {path, "magic"});
}

TEST_F(IdxReaderTest, NonUint8TypeCodeIsCorruption) {
  const std::string path = Path("float.gz");
  WriteGz(path, MakeIdx(0x0D, {3}, Bytes(12, 0)));
  ExpectError(ReadIdxUint8(path, 1).status(), StatusCode::kCorruption, {path, "float32", "0x0d"});
}

TEST_F(IdxReaderTest, DimensionCountMismatchIsCorruption) {
  // A label file handed over as the image file: 1 dimension where 3 are expected.
  const std::string images = Path("img.gz"), labels = Path("lbl.gz");
  WriteSmallPair(images, labels);
  Status s = ReadIdxImagesAndLabels(labels, images, 3).status();
  ExpectError(s, StatusCode::kCorruption, {labels, "1 dimensions, expected 3"});
}

TEST_F(IdxReaderTest, AbsurdDimensionsAreRejectedBeforeAllocating) {
  // Header claims 10^15 bytes but the file is 16 bytes long: must fail on the header.
  const std::string path = Path("huge.gz");
  WriteGz(path, MakeIdx(0x08, {100000, 100000, 100000}, {}));
  ExpectError(ReadIdxUint8(path, 3).status(), StatusCode::kCorruption, {path, "1 GiB"});
  // Just over the cap: 2^15 * 2^15 * 2 = 2^31 bytes.
  WriteGz(path, MakeIdx(0x08, {1u << 15, 1u << 15, 2}, {}));
  ExpectError(ReadIdxUint8(path, 3).status(), StatusCode::kCorruption, {path, "1 GiB"});
}

TEST_F(IdxReaderTest, ZeroDimensionIsCorruption) {
  const std::string path = Path("zero.gz");
  WriteGz(path, MakeIdx(0x08, {0, 28, 28}, {}));
  ExpectError(ReadIdxUint8(path, 3).status(), StatusCode::kCorruption, {path, "size 0"});
}

TEST_F(IdxReaderTest, TruncatedDataIsCorruption) {
  const std::string path = Path("short.gz");
  WriteGz(path, MakeIdx(0x08, {4, 2, 3}, image_bytes_));  // 18 of 24 bytes
  ExpectError(ReadIdxUint8(path, 3).status(), StatusCode::kCorruption,
              {path, "truncated", "24", "18"});
  // Same for an uncompressed file, where zlib reports a plain end of file.
  const std::string plain = Path("short.idx");
  WritePlain(plain, MakeIdx(0x08, {4, 2, 3}, image_bytes_));
  ExpectError(ReadIdxUint8(plain, 3).status(), StatusCode::kCorruption,
              {plain, "truncated", "24", "18"});
  // Also for a header claiming ~1 GiB with a few bytes present: fails without a 1 GiB buffer.
  WriteGz(path, MakeIdx(0x08, {1u << 14, 1u << 8, 1u << 8}, image_bytes_));
  ExpectError(ReadIdxUint8(path, 3).status(), StatusCode::kCorruption, {path, "truncated"});
}

TEST_F(IdxReaderTest, TruncatedHeaderIsCorruption) {
  const std::string path = Path("hdr.gz");
  WriteGz(path, {0, 0});
  ExpectError(ReadIdxUint8(path, 1).status(), StatusCode::kCorruption, {path, "too short"});
  Bytes b = MakeIdx(0x08, {3, 2, 3}, {});
  b.resize(9);  // magic + 1 of 3 dims + 1 byte
  WriteGz(path, b);
  ExpectError(ReadIdxUint8(path, 3).status(), StatusCode::kCorruption, {path, "header"});
  WriteGz(path, {});
  ExpectError(ReadIdxUint8(path, 1).status(), StatusCode::kCorruption, {path});
}

TEST_F(IdxReaderTest, TrailingBytesAreCorruption) {
  const std::string path = Path("long.gz");
  WriteGz(path, MakeIdx(0x08, {3}, {0, 1, 2, 7}));
  ExpectError(ReadIdxUint8(path, 1).status(), StatusCode::kCorruption, {path, "after"});
}

TEST_F(IdxReaderTest, CutGzipStreamIsCorruption) {
  Bytes payload(50000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>((i * 7919) % 251);
  const std::string path = Path("cut.gz");
  WriteGz(path, MakeIdx(0x08, {50000}, payload));
  Bytes raw = ReadRaw(path);
  ASSERT_GT(raw.size(), 100u);
  const Bytes whole = raw;
  raw.resize(raw.size() / 2);
  WritePlain(path, raw);
  ExpectError(ReadIdxUint8(path, 1).status(), StatusCode::kCorruption, {path, "truncated"});
  // Only the 8-byte CRC/size trailer missing: every data byte inflates, but unverified.
  raw.assign(whole.begin(), whole.end() - 8);
  WritePlain(path, raw);
  ExpectError(ReadIdxUint8(path, 1).status(), StatusCode::kCorruption,
              {path, "gzip stream ends early"});
}

TEST_F(IdxReaderTest, DamagedGzipStreamIsCorruption) {
  Bytes payload(50000);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>((i * 7919) % 251);
  const std::string path = Path("bad.gz");
  WriteGz(path, MakeIdx(0x08, {50000}, payload));
  Bytes raw = ReadRaw(path);
  ASSERT_GT(raw.size(), 100u);
  // Flip bits in the middle of the deflate data: either inflate fails or the CRC does.
  for (size_t i = raw.size() / 2; i < raw.size() / 2 + 8; ++i) raw[i] ^= 0x5A;
  WritePlain(path, raw);
  ExpectError(ReadIdxUint8(path, 1).status(), StatusCode::kCorruption, {path, "gzip"});
}

TEST_F(IdxReaderTest, ImageLabelCountMismatchIsCorruption) {
  const std::string images = Path("img.gz"), labels = Path("lbl.gz");
  WriteGz(images, MakeIdx(0x08, {3, 2, 3}, image_bytes_));
  WriteGz(labels, MakeIdx(0x08, {2}, {0, 1}));
  ExpectError(ReadIdxImagesAndLabels(images, labels, 3).status(), StatusCode::kCorruption,
              {images, labels, "3 images", "2 labels"});
}

TEST_F(IdxReaderTest, LabelOutOfRangeIsCorruption) {
  const std::string images = Path("img.gz"), labels = Path("lbl.gz");
  WriteSmallPair(images, labels);  // labels 0, 2, 1
  ExpectError(ReadIdxImagesAndLabels(images, labels, 2).status(), StatusCode::kCorruption,
              {labels, "label 2 at sample 1"});
}

TEST_F(IdxReaderTest, BadNumClassesIsInvalidArgument) {
  const std::string images = Path("img.gz"), labels = Path("lbl.gz");
  WriteSmallPair(images, labels);
  EXPECT_EQ(ReadIdxImagesAndLabels(images, labels, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadIdxImagesAndLabels(images, labels, 257).status().code(),
            StatusCode::kInvalidArgument);
}

// ---- Fashion-MNIST ------------------------------------------------------------------

bool FashionMnistInstalled() {
  const std::string d = DefaultFashionMnistDir();
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    if (!std::filesystem::exists(d + "/" + f)) return false;
  }
  return true;
}

void CheckFashionMnist(const Dataset& ds, size_t expected_size) {
  EXPECT_EQ(ds.size(), expected_size);
  EXPECT_EQ(ds.sample_shape, (std::vector<int>{28, 28, 1}));
  EXPECT_EQ(ds.num_classes, 10);
  ASSERT_EQ(ds.features.size(), expected_size * 784);
  float lo = 1.0f, hi = 0.0f;
  double sum = 0.0;
  for (float v : ds.features) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
  // Fashion-MNIST's mean pixel is about 0.286; a wrong scale or layout moves it far.
  EXPECT_NEAR(sum / static_cast<double>(ds.features.size()), 0.286, 0.01);
  std::vector<size_t> per_class(10, 0);
  for (int32_t l : ds.labels) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    ++per_class[static_cast<size_t>(l)];
  }
  for (size_t c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], expected_size / 10) << "class " << c;
}

TEST(FashionMnistTest, LoadsRealTrainAndTestSplits) {
  if (!FashionMnistInstalled()) {
    GTEST_SKIP() << "Fashion-MNIST is not installed at " << DefaultFashionMnistDir()
                 << " (apt-get install dataset-fashion-mnist, or set FEDMESH_DATA_DIR)";
  }
  Result<Dataset> train = LoadFashionMnist(DataSplit::kTrain);
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  CheckFashionMnist(*train, 60000);
  // The first training image is an ankle boot (class 9), the second a T-shirt (class 0).
  EXPECT_EQ(train->labels[0], 9);
  EXPECT_EQ(train->labels[1], 0);

  Result<Dataset> test = LoadFashionMnist(DataSplit::kTest, DefaultFashionMnistDir());
  ASSERT_TRUE(test.ok()) << test.status().ToString();
  CheckFashionMnist(*test, 10000);
  EXPECT_EQ(test->labels[0], 9);
}

TEST(FashionMnistTest, MissingFilesSayHowToInstall) {
  std::string tmpl = ::testing::TempDir() + "/fmnist_empty_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;

  Status s = LoadFashionMnist(DataSplit::kTest, dir).status();
  ExpectError(s, StatusCode::kNotFound,
              {"Fashion-MNIST not found at " + dir + "/t10k-images-idx3-ubyte.gz",
               "dataset-fashion-mnist", "FEDMESH_DATA_DIR"});

  // The environment variable is the default directory.
  const char* old = std::getenv("FEDMESH_DATA_DIR");
  const std::string saved = old != nullptr ? old : "";
  ASSERT_EQ(setenv("FEDMESH_DATA_DIR", dir.c_str(), 1), 0);
  EXPECT_EQ(DefaultFashionMnistDir(), dir);
  s = LoadFashionMnist(DataSplit::kTrain).status();
  ExpectError(s, StatusCode::kNotFound, {dir + "/train-images-idx3-ubyte.gz"});
  if (old != nullptr) {
    setenv("FEDMESH_DATA_DIR", saved.c_str(), 1);
  } else {
    unsetenv("FEDMESH_DATA_DIR");
  }
  std::filesystem::remove_all(dir);
}

TEST(FashionMnistTest, WrongImageSizeIsCorruption) {
  std::string tmpl = ::testing::TempDir() + "/fmnist_small_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  WriteGz(dir + "/t10k-images-idx3-ubyte.gz", MakeIdx(0x08, {2, 4, 4}, Bytes(32, 9)));
  WriteGz(dir + "/t10k-labels-idx1-ubyte.gz", MakeIdx(0x08, {2}, {3, 4}));
  ExpectError(LoadFashionMnist(DataSplit::kTest, dir).status(), StatusCode::kCorruption,
              {"4x4", "28x28"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fedmesh
