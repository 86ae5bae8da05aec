// Tests for core/data/csv_reader: the accepted dialect parsed to exact values, and each
// rejected input reported with the right code, its line number and the offending cell.
#include "core/data/csv_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdlib.h>

#include <bit>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace fedmesh {
namespace {

CsvOptions Label(const std::string& column, int num_classes = 0) {
  CsvOptions o;
  o.label_column = column;
  o.num_classes = num_classes;
  return o;
}

void ExpectError(const Status& s, StatusCode code, std::initializer_list<std::string> fragments) {
  EXPECT_EQ(s.code(), code) << "expected " << StatusCodeName(code) << ", got " << s.ToString();
  for (const std::string& f : fragments) {
    EXPECT_NE(s.message().find(f), std::string::npos)
        << "message \"" << s.message() << "\" lacks \"" << f << "\"";
  }
}

Status ParseError(const std::string& text, const CsvOptions& options = Label("y")) {
  return ParseCsv(text, options, "site.csv").status();
}

TEST(CsvReaderTest, ParsesFeaturesAndLabelInAnyColumn) {
  // Label in the middle; CRLF; spaces around cells; trailing newline; '+' and exponents.
  const std::string text =
      "age, y ,income\r\n"
      "31, 1, 2.5\r\n"
      " -4.25 ,0,+1e3\r\n"
      "0,2,-0.125\r\n";
  Result<Dataset> ds = ParseCsv(text, Label("y"), "site.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->sample_shape, (std::vector<int>{2}));
  EXPECT_EQ(ds->num_classes, 3);  // inferred: max label 2 + 1
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{1, 0, 2}));
  EXPECT_EQ(ds->features, (std::vector<float>{31.0f, 2.5f, -4.25f, 1000.0f, 0.0f, -0.125f}));
}

TEST(CsvReaderTest, ExplicitNumClassesIsKept) {
  Result<Dataset> ds = ParseCsv("a,label\n1,0\n2,1\n", Label("label", 5), "x");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->num_classes, 5);
}

TEST(CsvReaderTest, ToleratesNoFinalNewlineBlankLinesAndBom) {
  Result<Dataset> ds = ParseCsv("\xEF\xBB\xBFx,y\n1,0\n\n  \n2,1", Label("y"), "x");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ds->features, (std::vector<float>{1.0f, 2.0f}));
}

TEST(CsvReaderTest, IntegralDecimalLabelsAreAccepted) {
  // pandas writes an int column with missing values as floats: "3.0" is class 3.
  Result<Dataset> ds = ParseCsv("x,y\n1,3.0\n", Label("y", 4), "x");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{3}));
}

// The reader parses short decimals itself (Clinger's fast path) and everything else with
// std::from_chars: every value must be the float of from_chars' double, bit for bit.
TEST(CsvReaderTest, NumbersMatchFromCharsBitForBit) {
  std::vector<std::string> cells = {
      "0", "-0", "-0.0", "1", "0.1", "0.3", "+2.5", "1.", ".5", "-.5", "00012.50", "3.14159265358979",
      "9007199254740992", "9007199254740993", "18446744073709551615", "1234567890.123456789",
      "0.30000000000000004", "1.0000000000000002", "0.0000000000000000000001",
      "0.00000000000000000000001", "123456.789e-3", "1E5", "16777217", "16777217.5",
      "0.1000000000000000055511151231257827", "340282346638528859811704183484516925440",
      // float32 rounding midpoints: a double 1 ulp off (x * 1e-11 instead of x / 1e11)
      // rounds them to the other float.
      "15210.47412109375", "15245.18310546875", "-15120.70849609375"};
  std::mt19937_64 rng(19);
  for (int i = 0; i < 20000; ++i) {
    // Up to 20 digits with the point anywhere: both sides of the fast path's limits.
    const int digits = 1 + static_cast<int>(rng() % 20);
    std::string c = (rng() % 2) ? "-" : "";
    const int point = static_cast<int>(rng() % static_cast<uint64_t>(digits + 1));
    for (int d = 0; d < digits; ++d) {
      if (d == point && d > 0) c += '.';
      c += static_cast<char>('0' + rng() % 10);
    }
    cells.push_back(c);
  }
  std::string text = "x,y\n";
  for (const std::string& c : cells) text += c + ",0\n";
  Result<Dataset> ds = ParseCsv(text, Label("y", 2), "n.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ(ds->features.size(), cells.size());
  for (size_t i = 0; i < cells.size(); ++i) {
    std::string_view s = cells[i];
    if (s.front() == '+') s.remove_prefix(1);
    double v = 0.0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    ASSERT_TRUE(ec == std::errc() && ptr == s.data() + s.size()) << cells[i];
    EXPECT_EQ(std::bit_cast<uint32_t>(ds->features[i]), std::bit_cast<uint32_t>(static_cast<float>(v)))
        << "cell " << cells[i];
  }
}

// Cells of every width at every offset, so each delimiter position within the reader's
// 8-byte words is hit, with spaces to trim and UTF-8 text in a categorical column.
TEST(CsvReaderTest, CellsOfEveryWidthAndOffset) {
  CsvOptions o = Label("y", 2);
  o.categorical = {"city"};
  std::string text = "a, b ,city,y\n";
  std::vector<float> want;
  std::vector<std::string> cities = {"Z\xC3\xBCrich", "Bern", "Gen\xC3\xA8ve"};  // Zürich, Genève
  for (int w = 0; w < 20; ++w) {
    for (int pad = 0; pad < 9; ++pad) {
      const std::string a(static_cast<size_t>(w + 1), '7');
      text += std::string(static_cast<size_t>(pad), ' ') + a + "," + std::to_string(pad) +
              std::string(static_cast<size_t>(w % 3), '\t') + "," + cities[(w + pad) % 3] + "," +
              std::to_string(w % 2) + "\n";
      want.push_back(std::stof(a));
      want.push_back(static_cast<float>(pad));
      const size_t city = (w + pad) % 3;  // sorted: Bern, Genève, Zürich
      const size_t slot = city == 1 ? 0 : city == 2 ? 1 : 2;
      for (size_t k = 0; k < 3; ++k) want.push_back(k == slot ? 1.0f : 0.0f);
    }
  }
  Result<Dataset> ds = ParseCsv(text, o, "w.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->feature_names,
            (std::vector<std::string>{"a", "b", "city=Bern", "city=Gen\xC3\xA8ve", "city=Z\xC3\xBCrich"}));
  EXPECT_EQ(ds->features, want);
  EXPECT_EQ(ds->size(), 180u);
}

TEST(CsvReaderTest, TabDelimiter) {
  CsvOptions o = Label("y", 2);  // one row, one class: the count is given
  o.delimiter = '\t';
  Result<Dataset> ds = ParseCsv("a\ty\tb\n1.5\t1\t2\n", o, "x.tsv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->features, (std::vector<float>{1.5f, 2.0f}));
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{1}));
}

TEST(CsvReaderTest, RaggedRowGivesLineAndFieldCounts) {
  ExpectError(ParseError("a,b,y\n1,2,0\n1,2\n"), StatusCode::kCorruption,
              {"site.csv line 3", "expected 3 fields", "got 2"});
  ExpectError(ParseError("a,b,y\n1,2,0,9\n"), StatusCode::kCorruption,
              {"line 2", "expected 3", "got 4"});
}

TEST(CsvReaderTest, NonNumericCellIsQuotedWithColumn) {
  ExpectError(ParseError("a,b,y\n1,2,0\n\n1,abc,1\n"), StatusCode::kCorruption,
              {"line 4", "\"abc\"", "column \"b\"", "not a number"});
  ExpectError(ParseError("a,y\n1.5x,0\n"), StatusCode::kCorruption, {"line 2", "\"1.5x\""});
  ExpectError(ParseError("a,y\n,0\n"), StatusCode::kCorruption, {"line 2", "empty"});
}

TEST(CsvReaderTest, NanAndInfAreRejected) {
  ExpectError(ParseError("a,y\n1,0\nnan,1\n"), StatusCode::kCorruption, {"line 3", "NaN"});
  ExpectError(ParseError("a,y\n-inf,1\n"), StatusCode::kCorruption, {"line 2", "infinite"});
  ExpectError(ParseError("a,y\n1e39,1\n"), StatusCode::kCorruption, {"line 2", "float32"});
}

TEST(CsvReaderTest, LabelsMustBeNonNegativeIntegers) {
  ExpectError(ParseError("a,y\n1,-1\n"), StatusCode::kCorruption,
              {"line 2", "\"-1\"", "non-negative integer"});
  ExpectError(ParseError("a,y\n1,0\n2,1.5\n"), StatusCode::kCorruption, {"line 3", "\"1.5\""});
  ExpectError(ParseError("a,y\n1,cat\n"), StatusCode::kCorruption, {"line 2", "\"cat\""});
  ExpectError(ParseError("a,y\n1,100000\n"), StatusCode::kCorruption, {"line 2", "remap"});
  ExpectError(ParseError("a,y\n1,0\n1,3\n", Label("y", 3)), StatusCode::kCorruption,
              {"line 3", "num_classes 3"});
}

TEST(CsvReaderTest, EmptyFileAndHeaderOnly) {
  ExpectError(ParseError(""), StatusCode::kCorruption, {"site.csv", "no header"});
  ExpectError(ParseError("a,y\n"), StatusCode::kCorruption, {"site.csv", "no data rows"});
  ExpectError(ParseError("a,y\r\n\r\n"), StatusCode::kCorruption, {"no data rows"});
}

TEST(CsvReaderTest, HeaderProblems) {
  ExpectError(ParseError("a,b,a,y\n1,2,3,0\n"), StatusCode::kCorruption,
              {"line 1", "\"a\"", "twice", "columns 1 and 3"});
  ExpectError(ParseError("a,,y\n1,2,0\n"), StatusCode::kCorruption, {"line 1", "column 2"});
  ExpectError(ParseError("y\n0\n"), StatusCode::kCorruption, {"feature column"});
}

TEST(CsvReaderTest, UnknownLabelColumnListsAvailableColumns) {
  ExpectError(ParseError("age,income,target\n1,2,0\n", Label("label")),
              StatusCode::kInvalidArgument,
              {"\"label\"", "available columns: age, income, target"});
}

TEST(CsvReaderTest, QuotedFieldsAreNotSupported) {
  ExpectError(ParseError("a,y\n\"1\",0\n"), StatusCode::kCorruption,
              {"line 2", "quoted fields are not supported"});
  ExpectError(ParseError("\"a\",y\n1,0\n"), StatusCode::kCorruption,
              {"line 1", "quoted fields are not supported"});
}

TEST(CsvReaderTest, BadOptionsAreInvalidArgument) {
  EXPECT_EQ(ParseError("a,y\n1,0\n", Label("")).code(), StatusCode::kInvalidArgument);
  CsvOptions o = Label("y");
  o.delimiter = '"';
  EXPECT_EQ(ParseError("a,y\n1,0\n", o).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseError("a,y\n1,0\n", Label("y", -1)).code(), StatusCode::kInvalidArgument);
}

TEST(CsvReaderTest, ReadCsvFromFile) {
  std::string tmpl = ::testing::TempDir() + "/csv_reader_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string dir = tmpl;
  const std::string path = dir + "/bank.csv";
  {
    std::ofstream out(path, std::ios::binary);
    out << "balance,default\n100.5,0\n-3,1\n";
  }
  Result<Dataset> ds = ReadCsv(path, Label("default"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->features, (std::vector<float>{100.5f, -3.0f}));
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ds->num_classes, 2);

  {
    std::ofstream out(path, std::ios::binary);
    out << "balance,default\n100.5,0\nx,1\n";
  }
  ExpectError(ReadCsv(path, Label("default")).status(), StatusCode::kCorruption,
              {path + " line 3"});
  ExpectError(ReadCsv(dir + "/none.csv", Label("default")).status(), StatusCode::kNotFound,
              {dir + "/none.csv"});
  std::filesystem::remove_all(dir);
}

// German-credit-like rows: text categories one-hot encoded in place, in sorted order, with
// their names; a chosen subset and order of feature columns.
TEST(CsvReaderTest, CategoricalColumnsAreOneHotInSortedOrder) {
  CsvOptions o = Label("good");
  o.categorical = {"purpose", "housing"};
  const std::string text =
      "age,purpose,amount,housing,good\n"
      "30,car,1000,own,1\n"
      "45,furniture,250.5,rent,0\n"
      "22,car,90,free,1\n";
  Result<Dataset> ds = ParseCsv(text, o, "bank.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->sample_shape, (std::vector<int>{7}));
  EXPECT_EQ(ds->feature_names,
            (std::vector<std::string>{"age", "purpose=car", "purpose=furniture", "amount",
                                      "housing=free", "housing=own", "housing=rent"}));
  EXPECT_EQ(ds->features, (std::vector<float>{30, 1, 0, 1000, 0, 1, 0,  //
                                              45, 0, 1, 250.5f, 0, 0, 1,  //
                                              22, 1, 0, 90, 1, 0, 0}));
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{1, 0, 1}));

  // Fixed lists keep their order, and a value outside them is an error naming line and column.
  o.categories = {"housing=rent,own,free,other"};
  o.features = {"housing", "age"};
  o.categorical = {"housing"};
  ds = ParseCsv(text, o, "bank.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->feature_names,
            (std::vector<std::string>{"housing=rent", "housing=own", "housing=free",
                                      "housing=other", "age"}));
  EXPECT_EQ(ds->features, (std::vector<float>{0, 1, 0, 0, 30, 1, 0, 0, 0, 45, 0, 0, 1, 0, 22}));
  o.categories = {"housing=rent,own"};
  ExpectError(ParseCsv(text, o, "bank.csv").status(), StatusCode::kCorruption,
              {"bank.csv line 4", "\"free\"", "column \"housing\"", "rent, own"});
  // Text in a column not listed as categorical says how to fix it.
  ExpectError(ParseError("a,b,y\n1,car,0\n"), StatusCode::kCorruption,
              {"line 2", "\"car\"", "column \"b\"", "categorical"});
}

// categorical_encoding = "ids": one column per categorical holding the category's index
// (sorted order, or the listed one), for an embedding input.
TEST(CsvReaderTest, CategoricalColumnsAsIdsForAnEmbedding) {
  CsvOptions o = Label("good");
  o.categorical = {"purpose", "housing"};
  o.categorical_encoding = "ids";
  const std::string text =
      "age,purpose,amount,housing,good\n"
      "30,car,1000,own,1\n"
      "45,furniture,250.5,rent,0\n"
      "22,car,90,free,1\n";
  Result<Dataset> ds = ParseCsv(text, o, "bank.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->sample_shape, (std::vector<int>{4}));
  EXPECT_EQ(ds->feature_names, (std::vector<std::string>{"age", "purpose", "amount", "housing"}));
  EXPECT_EQ(ds->features, (std::vector<float>{30, 0, 1000, 1,  //
                                              45, 1, 250.5f, 2,  //
                                              22, 0, 90, 0}));
  o.categories = {"housing=rent,own,free"};
  ds = ParseCsv(text, o, "bank.csv");
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->features[3], 1.0f) << "own is listed second";
  EXPECT_EQ(ds->features[7], 0.0f);
  EXPECT_EQ(ds->features[11], 2.0f);
  o.categorical_encoding = "embedding";
  ExpectError(ParseCsv(text, o, "bank.csv").status(), StatusCode::kInvalidArgument,
              {"categorical_encoding", "\"embedding\""});
}

// missing = "impute_mean": a missing number is kept as NaN for the imputation
// (core/data/impute.h), a row without a label is left out, a missing category is an error.
TEST(CsvReaderTest, ImputeMeanKeepsMissingNumbersAsNaN) {
  CsvOptions o = Label("y");
  o.missing = "impute_mean";
  Result<Dataset> ds = ParseCsv("a,b,y\n1,NA,0\n,4,1\n5,6,\n7,8,1\n", o, "t.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ(ds->size(), 3u) << "the row without a label is left out";
  EXPECT_EQ(ds->features[0], 1.0f);
  EXPECT_TRUE(std::isnan(ds->features[1]));
  EXPECT_TRUE(std::isnan(ds->features[2]));
  EXPECT_EQ(ds->features[5], 8.0f);
  o.categorical = {"b"};
  ExpectError(ParseCsv("a,b,y\n1,x,0\n2,,1\n", o, "t.csv").status(), StatusCode::kCorruption,
              {"t.csv line 3", "column \"b\"", "a category has no mean"});
}

TEST(CsvReaderTest, BadColumnOptionsNameTheColumn) {
  CsvOptions o = Label("y");
  o.features = {"a", "zz"};
  ExpectError(ParseError("a,b,y\n1,2,0\n", o), StatusCode::kInvalidArgument,
              {"\"zz\"", "available columns: a, b, y"});
  o.features = {"a", "y"};
  ExpectError(ParseError("a,b,y\n1,2,0\n", o), StatusCode::kInvalidArgument, {"label column"});
  o.features = {};
  o.categorical = {"c"};
  ExpectError(ParseError("a,b,y\n1,2,0\n", o), StatusCode::kInvalidArgument, {"\"c\""});
  o.categorical = {"a"};
  o.categories = {"a"};
  ExpectError(ParseError("a,b,y\n1,2,0\n", o), StatusCode::kInvalidArgument, {"column=a,b,c"});
  o.categories = {"a=x,x"};
  ExpectError(ParseError("a,b,y\n1,2,0\n", o), StatusCode::kInvalidArgument, {"distinct"});
  o = Label("y");
  o.missing = "mean";
  ExpectError(ParseError("a,y\n1,0\n", o), StatusCode::kInvalidArgument, {"\"mean\""});
}

TEST(CsvReaderTest, MissingCellsAreAnErrorOrDropTheirRow) {
  const std::string text = "a,b,y\n1,2,0\nNA,3,1\n4,?,1\n5,6,\n7,8,1\n";
  ExpectError(ParseError(text), StatusCode::kCorruption,
              {"site.csv line 3", "\"NA\"", "column \"a\"", "missing", "drop"});
  CsvOptions o = Label("y");
  o.missing = "drop";
  Result<Dataset> ds = ParseCsv(text, o, "site.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->features, (std::vector<float>{1, 2, 7, 8}));
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 1}));
  ExpectError(ParseCsv("a,y\nNA,1\n", o, "site.csv").status(), StatusCode::kCorruption,
              {"no data rows without missing values"});
  // Every spelling of a missing cell drops its row, NAN (an upper-case export) included: it
  // used to be parsed as a number, refused as non-finite, and not dropped.
  ds = ParseCsv("a,y\n1,0\nNAN,1\nNaN,1\nnan,0\nN/A,1\nnull,1\nNULL,0\n,1\n2,1\n", o, "site.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->features, (std::vector<float>{1, 2}));
}

// Text labels map in the order listed, the same on a site that lacks a class; anything else
// is an error. Without label_values, text labels say how to map them.
TEST(CsvReaderTest, TextLabelsMapInTheListedOrder) {
  CsvOptions o = Label("diagnosis");
  o.label_values = {"B", "M"};
  Result<Dataset> ds = ParseCsv("r,diagnosis\n1,M\n2,B\n3,M\n", o, "wdbc.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(ds->num_classes, 2);
  ds = ParseCsv("r,diagnosis\n1,M\n", o, "wdbc.csv");  // only malignant rows: still class 1
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{1}));
  EXPECT_EQ(ds->num_classes, 2);
  ExpectError(ParseCsv("r,diagnosis\n1,X\n", o, "wdbc.csv").status(), StatusCode::kCorruption,
              {"line 2", "\"X\"", "label_values: B, M"});
  ExpectError(ParseError("r,diagnosis\n1,M\n", Label("diagnosis")), StatusCode::kCorruption,
              {"line 2", "\"M\"", "label_values"});
}

TEST(CsvReaderTest, RegressionTargetsAreFloats) {
  CsvOptions o = Label("progression");
  o.regression = true;
  Result<Dataset> ds = ParseCsv("age,bmi,progression\n0.03,0.06,151\n-0.01,-0.05,75.5\n", o, "d");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->target_dim, 1);
  EXPECT_EQ(ds->targets, (std::vector<float>{151.0f, 75.5f}));
  EXPECT_EQ(ds->labels, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(ds->features, (std::vector<float>{0.03f, 0.06f, -0.01f, -0.05f}));
  ExpectError(ParseCsv("a,progression\n1,high\n", o, "d").status(), StatusCode::kCorruption,
              {"line 2", "target \"high\""});
}

// A label column with one class cannot train a classifier, unless num_classes says the site
// lacks the others.
TEST(CsvReaderTest, OneClassIsAnErrorUnlessNumClassesIsSet) {
  ExpectError(ParseError("a,y\n1,1\n2,1\n"), StatusCode::kCorruption,
              {"site.csv", "column \"y\"", "single class"});
  Result<Dataset> ds = ParseCsv("a,y\n1,1\n2,1\n", Label("y", 3), "site.csv");
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->num_classes, 3);
}

}  // namespace
}  // namespace fedmesh
