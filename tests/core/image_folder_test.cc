// Tests for core/data/image_folder: real PNG and JPEG files written here with
// stb_image_write, read back to exact pixel values, labels in sorted folder order, the
// layout rules, and every rejected input reported with its code and the offending path.
#include "core/data/image_folder.h"

#include <gtest/gtest.h>
#include <stb/stb_image_write.h>
#include <stdlib.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/core/status_assertions.h"

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;
using ::fedmesh::testing::HasCode;

struct TempDir {
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "image_folder_test_XXXXXX").string();
    EXPECT_NE(mkdtemp(tmpl.data()), nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  // Creates (if needed) and returns the sub-folder `name`.
  std::string Sub(const std::string& name) const {
    fs::create_directories(path + "/" + name);
    return path + "/" + name;
  }
  std::string path;
};

float U8(int v) { return static_cast<float>(v) / 255.0f; }

// `pixels` is h x w x comp, row-major.
void WritePng(const std::string& path, int w, int h, int comp, const Bytes& pixels) {
  ASSERT_EQ(pixels.size(), static_cast<size_t>(w * h * comp));
  ASSERT_NE(stbi_write_png(path.c_str(), w, h, comp, pixels.data(), w * comp), 0) << path;
}

void WriteJpg(const std::string& path, int w, int h, int comp, const Bytes& pixels) {
  ASSERT_EQ(pixels.size(), static_cast<size_t>(w * h * comp));
  ASSERT_NE(stbi_write_jpg(path.c_str(), w, h, comp, pixels.data(), 100), 0) << path;
}

void WriteBytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

Bytes ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A grey 1x1 PNG of value v: one file whose decoded value says which file it was.
void WriteGrey1x1(const std::string& path, uint8_t v) { WritePng(path, 1, 1, 1, {v}); }

void PutBe32(Bytes* b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b->push_back(static_cast<uint8_t>(v >> s));
}

// A PNG of only a signature, an IHDR claiming w x h 8-bit grey, and IEND: no pixel data,
// so decoding it could only fail as corrupt; a size refusal shows the header was enough.
Bytes PngHeaderClaiming(uint32_t w, uint32_t h) {
  Bytes b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  auto chunk = [&b](const char* type, const Bytes& data) {
    PutBe32(&b, static_cast<uint32_t>(data.size()));
    Bytes typed(type, type + 4);
    typed.insert(typed.end(), data.begin(), data.end());
    b.insert(b.end(), typed.begin(), typed.end());
    PutBe32(&b, static_cast<uint32_t>(crc32(0L, typed.data(), static_cast<uInt>(typed.size()))));
  };
  Bytes ihdr;
  PutBe32(&ihdr, w);
  PutBe32(&ihdr, h);
  ihdr.insert(ihdr.end(), {8, 0, 0, 0, 0});  // depth 8, grey, deflate, no filter, no interlace
  chunk("IHDR", ihdr);
  chunk("IEND", {});
  return b;
}

ImageFolderOptions Size(int h, int w, int channels) {
  ImageFolderOptions o;
  o.height = h;
  o.width = w;
  o.channels = channels;
  return o;
}

TEST(ImageFolderTest, GreyPngReadsExactValues) {
  TempDir d;
  WritePng(d.Sub("only") + "/x.png", 2, 2, 1, {0, 51, 128, 255});
  Result<Dataset> ds = ReadImageFolder(d.path, Size(2, 2, 1));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->sample_shape, (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(ds->num_classes, 1);
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0}));
  EXPECT_EQ(ds->features, (std::vector<float>{U8(0), U8(51), U8(128), U8(255)}));
  EXPECT_TRUE(ds->targets.empty());
}

TEST(ImageFolderTest, RgbPngAsRgbKeepsHwcOrderAndAsGreyUsesStbLuma) {
  TempDir d;
  // 2 wide x 1 high: (200, 50, 10) then (0, 255, 0).
  WritePng(d.Sub("c") + "/x.png", 2, 1, 3, {200, 50, 10, 0, 255, 0});

  Result<Dataset> rgb = ReadImageFolder(d.path, Size(1, 2, 3));
  ASSERT_TRUE(rgb.ok()) << rgb.status().ToString();
  EXPECT_EQ(rgb->sample_shape, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(rgb->features, (std::vector<float>{U8(200), U8(50), U8(10), U8(0), U8(255), U8(0)}));

  // stb's luma: (77 r + 150 g + 29 b) >> 8 = 90 and 149.
  Result<Dataset> grey = ReadImageFolder(d.path, Size(1, 2, 1));
  ASSERT_TRUE(grey.ok()) << grey.status().ToString();
  EXPECT_EQ(grey->sample_shape, (std::vector<int>{1, 2, 1}));
  EXPECT_EQ(grey->features, (std::vector<float>{U8(90), U8(149)}));
}

TEST(ImageFolderTest, GreyPngAsRgbRepeatsTheValue) {
  TempDir d;
  WritePng(d.Sub("c") + "/x.png", 1, 1, 1, {77});
  Result<Dataset> ds = ReadImageFolder(d.path, Size(1, 1, 3));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->features, (std::vector<float>{U8(77), U8(77), U8(77)}));
}

TEST(ImageFolderTest, ResizeAveragesEachChannelSeparately) {
  TempDir d;
  // 4x4 RGB: red 240 everywhere, green 0 in the left half and 255 in the right, blue 30.
  Bytes px;
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x)
      px.insert(px.end(), {240, static_cast<uint8_t>(x < 2 ? 0 : 255), 30});
  }
  WritePng(d.Sub("c") + "/x.png", 4, 4, 3, px);
  Result<Dataset> ds = ReadImageFolder(d.path, Size(2, 2, 3));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ(ds->features.size(), 12u);
  const float tol = 1.5f / 255.0f;  // uniform planes stay uniform up to rounding
  for (int p = 0; p < 4; ++p) {
    const float* v = &ds->features[static_cast<size_t>(p) * 3];
    SCOPED_TRACE("pixel " + std::to_string(p));
    EXPECT_NEAR(v[0], U8(240), tol);
    EXPECT_NEAR(v[2], U8(30), tol);
    if (p % 2 == 0) {
      EXPECT_LT(v[1], 0.25f);  // left column: mostly the dark half
    } else {
      EXPECT_GT(v[1], 0.75f);
    }
  }
  // Left and right mirror each other: the filter is symmetric.
  EXPECT_NEAR(ds->features[1] + ds->features[4], 1.0f, 2.0f / 255.0f);

  // A 4x4 grey image of four 2x2 blocks, 40 / 80 over 160 / 200: each output pixel is a
  // weighted mean of its block and its neighbours, so it keeps the blocks' order and stays
  // inside the range of the blocks' values.
  TempDir g;
  WritePng(g.Sub("c") + "/x.png", 4, 4, 1,
           {40, 40, 80, 80, 40, 40, 80, 80, 160, 160, 200, 200, 160, 160, 200, 200});
  Result<Dataset> grey = ReadImageFolder(g.path, Size(2, 2, 1));
  ASSERT_TRUE(grey.ok()) << grey.status().ToString();
  const std::vector<float>& f = grey->features;
  ASSERT_EQ(f.size(), 4u);
  EXPECT_LT(f[0], f[1]);
  EXPECT_LT(f[1], f[2]);
  EXPECT_LT(f[2], f[3]);
  EXPECT_GE(f[0], U8(40));
  EXPECT_LE(f[3], U8(200));
  EXPECT_NEAR(f[0] + f[3], U8(40) + U8(200), 2.0f / 255.0f);  // symmetric filter
  EXPECT_NEAR(f[1] + f[2], U8(80) + U8(160), 2.0f / 255.0f);
}

TEST(ImageFolderTest, ResizeKeepsWidthAndHeightApart) {
  TempDir d;
  // 4 wide x 2 high, dark left half, bright right half, read as 1 high x 2 wide: with width
  // and height swapped both outputs would be the same mid-grey.
  WritePng(d.Sub("c") + "/x.png", 4, 2, 1, {0, 0, 255, 255, 0, 0, 255, 255});
  Result<Dataset> ds = ReadImageFolder(d.path, Size(1, 2, 1));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ(ds->features.size(), 2u);
  EXPECT_LT(ds->features[0], 0.25f);
  EXPECT_GT(ds->features[1], 0.75f);
}

TEST(ImageFolderTest, UpscalesAUniformImageToItsValue) {
  TempDir d;
  WritePng(d.Sub("c") + "/x.png", 1, 1, 1, {77});
  Result<Dataset> ds = ReadImageFolder(d.path, Size(3, 5, 1));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->features, std::vector<float>(15, U8(77)));
}

TEST(ImageFolderTest, JpegDecodesCloseToItsColour) {
  TempDir d;
  Bytes px;
  for (int i = 0; i < 16 * 16; ++i) px.insert(px.end(), {200, 100, 50});
  WriteJpg(d.Sub("c") + "/x.jpg", 16, 16, 3, px);
  Result<Dataset> ds = ReadImageFolder(d.path, Size(16, 16, 3));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ(ds->features.size(), 16u * 16 * 3);
  for (size_t i = 0; i < ds->features.size(); i += 3) {
    EXPECT_NEAR(ds->features[i], U8(200), 4.0f / 255.0f) << i;
    EXPECT_NEAR(ds->features[i + 1], U8(100), 4.0f / 255.0f) << i;
    EXPECT_NEAR(ds->features[i + 2], U8(50), 4.0f / 255.0f) << i;
  }
}

// Builds: Apple/{z.png=5}, mango/{b.png=20, a.png=10, c.PNG=30, d.JPEG, e.jpg},
// zebra/{only.png=99}, plus everything the reader must ignore. Files are created out of
// order so that directory order cannot pass for sorted order.
void BuildLabelledTree(const TempDir& d) {
  WriteGrey1x1(d.Sub("zebra") + "/only.png", 99);
  const std::string mango = d.Sub("mango");
  WriteGrey1x1(mango + "/b.png", 20);
  WriteGrey1x1(mango + "/a.png", 10);
  WriteGrey1x1(mango + "/c.PNG", 30);
  WriteJpg(mango + "/e.jpg", 8, 8, 1, Bytes(64, 180));
  WriteJpg(mango + "/d.JPEG", 8, 8, 1, Bytes(64, 140));
  WriteGrey1x1(d.Sub("Apple") + "/z.png", 5);
  // Ignored: non-image files, hidden files (this one is not even an image), a nested
  // folder of images, a folder named like an image, files and hidden folders at the top.
  WriteBytes(mango + "/notes.txt", {'h', 'i'});
  WriteBytes(mango + "/a.png.bak", {'x'});
  WriteBytes(mango + "/.hidden.png", {'n', 'o', 't'});
  WriteGrey1x1(d.Sub("mango/nested") + "/n.png", 1);
  d.Sub("mango/folder.png");
  WriteBytes(d.path + "/labels.csv", {'a'});
  WriteGrey1x1(d.Sub(".git") + "/g.png", 2);
}

TEST(ImageFolderTest, LabelsFollowSortedFolderNamesAndFilesSortedNames) {
  TempDir d;
  BuildLabelledTree(d);
  Result<Dataset> ds = ReadImageFolder(d.path, Size(1, 1, 1));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  // Byte order: "Apple" < "mango" < "zebra" (upper case sorts first).
  EXPECT_EQ(ds->num_classes, 3);
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 1, 1, 1, 1, 1, 2}));
  ASSERT_EQ(ds->features.size(), 7u);
  EXPECT_EQ(ds->features[0], U8(5));
  EXPECT_EQ(ds->features[1], U8(10));                    // a.png
  EXPECT_EQ(ds->features[2], U8(20));                    // b.png
  EXPECT_EQ(ds->features[3], U8(30));                    // c.PNG
  EXPECT_NEAR(ds->features[4], U8(140), 3.0f / 255.0f);  // d.JPEG
  EXPECT_NEAR(ds->features[5], U8(180), 3.0f / 255.0f);  // e.jpg
  EXPECT_EQ(ds->features[6], U8(99));
}

TEST(ImageFolderTest, SameTreeReadsIdenticallyTwice) {
  TempDir d;
  BuildLabelledTree(d);
  Result<Dataset> a = ReadImageFolder(d.path, Size(3, 3, 3));
  Result<Dataset> b = ReadImageFolder(d.path, Size(3, 3, 3));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->labels, b->labels);
  EXPECT_EQ(a->features, b->features);
  EXPECT_EQ(a->features.size(), 7u * 27);
}

// --- Rejected input: each names the path concerned. ---

TEST(ImageFolderTest, MissingFolderIsNotFound) {
  TempDir d;
  const std::string missing = d.path + "/nope";
  EXPECT_TRUE(HasCode(ReadImageFolder(missing, {}).status(), StatusCode::kNotFound, missing));
}

TEST(ImageFolderTest, FileInsteadOfFolderIsInvalidArgument) {
  TempDir d;
  const std::string file = d.path + "/x.png";
  WriteGrey1x1(file, 1);
  EXPECT_TRUE(HasCode(ReadImageFolder(file, {}).status(), StatusCode::kInvalidArgument, file));
}

TEST(ImageFolderTest, FolderWithoutClassFoldersIsInvalidArgument) {
  TempDir d;
  EXPECT_TRUE(HasCode(ReadImageFolder(d.path, {}).status(), StatusCode::kInvalidArgument, d.path));
  // Images at the top and hidden folders do not make classes.
  WriteGrey1x1(d.path + "/x.png", 1);
  WriteGrey1x1(d.Sub(".cache") + "/y.png", 1);
  const Status s = ReadImageFolder(d.path, {}).status();
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, d.path));
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, "no class sub-folders"));
}

TEST(ImageFolderTest, ClassFolderWithoutImagesIsInvalidArgumentNamingIt) {
  TempDir d;
  WriteGrey1x1(d.Sub("a") + "/x.png", 1);
  const std::string b = d.Sub("b");
  WriteBytes(b + "/readme.txt", {'x'});
  WriteGrey1x1(d.Sub("b/deeper") + "/y.png", 1);  // nested: not b's image
  EXPECT_TRUE(HasCode(ReadImageFolder(d.path, {}).status(), StatusCode::kInvalidArgument, b));
}

TEST(ImageFolderTest, TruncatedPngIsCorruptionNamingFileAndStbReason) {
  TempDir d;
  Bytes px(32 * 32);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 37 + i / 7);
  const std::string file = d.Sub("c") + "/cut.png";
  WritePng(file, 32, 32, 1, px);
  Bytes whole = ReadBytes(file);
  ASSERT_GT(whole.size(), 100u);
  whole.resize(whole.size() / 2);
  WriteBytes(file, whole);
  const Status s = ReadImageFolder(d.path, Size(32, 32, 1)).status();
  EXPECT_TRUE(HasCode(s, StatusCode::kCorruption, file));
  EXPECT_TRUE(HasCode(s, StatusCode::kCorruption, "(stb: "));
}

TEST(ImageFolderTest, TextFileNamedPngIsCorruption) {
  TempDir d;
  const std::string file = d.Sub("c") + "/text.png";
  const std::string text = "this is not an image\n";
  WriteBytes(file, Bytes(text.begin(), text.end()));
  const Status s = ReadImageFolder(d.path, {}).status();
  EXPECT_TRUE(HasCode(s, StatusCode::kCorruption, file));
  EXPECT_TRUE(HasCode(s, StatusCode::kCorruption, "(stb: "));
}

TEST(ImageFolderTest, EmptyPngIsCorruption) {
  TempDir d;
  const std::string file = d.Sub("c") + "/empty.png";
  WriteBytes(file, {});
  const Status s = ReadImageFolder(d.path, {}).status();
  EXPECT_TRUE(HasCode(s, StatusCode::kCorruption, file));
  EXPECT_TRUE(HasCode(s, StatusCode::kCorruption, "empty"));
}

TEST(ImageFolderTest, HugeClaimedSizeIsRefusedFromTheHeader) {
  TempDir d;
  const std::string file = d.Sub("c") + "/huge.png";
  // 20000 x 20000 = 4e8 pixels: within what stb's header check accepts, over the default
  // limit of 64 Mi. Decoding would need 400 MB; a corruption error would mean it was tried.
  WriteBytes(file, PngHeaderClaiming(20000, 20000));
  Status s = ReadImageFolder(d.path, {}).status();
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, file));
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, "over the limit of 67108864 pixels"));
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, "20000 x 20000"));

  // 100000 x 100000 (1e10 pixels) is beyond stb's own header limit (2^30 bytes), so stb
  // refuses to read the header at all: still refused, as corrupt, before any decoding.
  WriteBytes(file, PngHeaderClaiming(100000, 100000));
  s = ReadImageFolder(d.path, {}).status();
  EXPECT_TRUE(HasCode(s, StatusCode::kCorruption, file));
}

TEST(ImageFolderTest, PixelLimitAppliesToTheStoredSize) {
  TempDir d;
  const std::string file = d.Sub("c") + "/x.png";
  WritePng(file, 4, 4, 1, Bytes(16, 9));
  ImageFolderOptions o = Size(2, 2, 1);
  o.max_pixels_per_image = 15;
  EXPECT_TRUE(HasCode(ReadImageFolder(d.path, o).status(), StatusCode::kInvalidArgument, file));
  o.max_pixels_per_image = 16;
  Result<Dataset> ds = ReadImageFolder(d.path, o);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->features, std::vector<float>(4, U8(9)));
}

TEST(ImageFolderTest, MoreImagesThanMaxFilesIsInvalidArgument) {
  TempDir d;
  WriteGrey1x1(d.Sub("a") + "/1.png", 1);
  WriteGrey1x1(d.Sub("b") + "/2.png", 2);
  WriteGrey1x1(d.Sub("b") + "/3.png", 3);
  WriteBytes(d.Sub("b") + "/notes.txt", {'x'});  // not an image: not counted
  ImageFolderOptions o;
  o.max_files = 3;
  ASSERT_TRUE(ReadImageFolder(d.path, o).ok());
  o.max_files = 2;
  const Status s = ReadImageFolder(d.path, o).status();
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, "max_files"));
  EXPECT_TRUE(HasCode(s, StatusCode::kInvalidArgument, d.path + "/b/"));
}

TEST(ImageFolderTest, BadOptionsAreInvalidArgumentBeforeTouchingTheFolder) {
  const std::string missing = "/nonexistent/image_folder_test";
  struct Case {
    ImageFolderOptions o;
    const char* needle;
  };
  ImageFolderOptions base;
  std::vector<Case> cases;
  for (int h : {0, -1, 4097}) {
    Case c{base, "height and width"};
    c.o.height = h;
    cases.push_back(c);
  }
  for (int w : {0, 4097}) {
    Case c{base, "height and width"};
    c.o.width = w;
    cases.push_back(c);
  }
  for (int ch : {0, 2, 4}) {
    Case c{base, "channels"};
    c.o.channels = ch;
    cases.push_back(c);
  }
  {
    Case c{base, "max_files"};
    c.o.max_files = 0;
    cases.push_back(c);
  }
  {
    Case c{base, "max_pixels_per_image"};
    c.o.max_pixels_per_image = 0;
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    EXPECT_TRUE(
        HasCode(ReadImageFolder(missing, c.o).status(), StatusCode::kInvalidArgument, c.needle));
  }
  // The limits themselves are accepted.
  TempDir d;
  WriteGrey1x1(d.Sub("c") + "/x.png", 50);
  Result<Dataset> ds = ReadImageFolder(d.path, Size(4096, 1, 3));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->sample_shape, (std::vector<int>{4096, 1, 3}));
}

}  // namespace
}  // namespace fedmesh
