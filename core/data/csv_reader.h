// CSV reader for tabular sites (a bank's transactions, a hospital's lab values): one
// header line naming the columns, then one sample per line. The column named by
// CsvOptions::label_column holds the label: an integer class index, one of
// CsvOptions::label_values (text labels, mapped in the order listed), or a float target
// (CsvOptions::regression). The features are the columns CsvOptions::features names (in
// that order; default every other column in file order): numbers, or for the columns
// listed in CsvOptions::categorical any text, one-hot encoded in place (one 0/1 column per
// category). Missing cells (empty, NA, N/A, NaN, nan, null, NULL, ?) are an error, or drop
// their row (CsvOptions::missing). The dialect is deliberately small (no quoting) so that
// what is accepted is unambiguous; anything else is rejected with the file, line, column
// and what to change.
// Error codes: InvalidArgument for bad options (including a column the file lacks),
// NotFound / IOError for the file itself, Corruption for malformed content.
// Thread-safety: stateless; concurrent calls are safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/data/dataset.h"
#include "core/status.h"

namespace fedmesh {

// Labels above this are refused: inferring num_classes from them would allocate per-class
// tables of that size, and real class indices are small. Remap larger codes to 0..K-1.
inline constexpr int kMaxCsvLabel = 65535;

struct CsvOptions {
  // Name of the label column, as written in the header. Required (no default) unless
  // `unlabeled`.
  std::string label_column;
  // The file has no label column (a feature party of split training holds columns, not
  // labels): label_column must be empty, every label is 0 and num_classes 0. Default false.
  bool unlabeled = false;
  // Field separator. Default ','; use '\t' for TSV. '"', '\r' and '\n' are not allowed.
  char delimiter = ',';
  // Number of classes. Default 0: inferred as the largest label + 1 (or the number of
  // label_values). When > 0, a label >= num_classes is an error; set it when a site may lack
  // the highest classes, so that every site agrees on the model's output size.
  int num_classes = 0;
  // Text labels in class order, e.g. {"B", "M"}: a label cell must be one of them and gets
  // its index. Default empty: labels are integer class indices. Listed rather than
  // inferred so that a site lacking a class maps the others as every other site does.
  std::vector<std::string> label_values;
  // The label column is a float regression target (Dataset::targets, target_dim 1).
  // Default false.
  bool regression = false;
  // Feature columns, in this order. Default empty: every column but the label, in file
  // order.
  std::vector<std::string> features;
  // Feature columns holding categories (any text), one-hot encoded in place. Default none.
  std::vector<std::string> categorical;
  // Fixed category lists, "column=a,b,c": the one-hot columns in that order, and any other
  // value an error. Every site must give the same lists (or hold the same categories, as
  // unlisted columns use the sorted distinct values of the file). Default empty.
  std::vector<std::string> categories;
  // How categorical columns become features: "onehot" (default): one 0/1 column per
  // category, named "column=category"; "ids": one column holding the category's index
  // (0, 1, ... in the categories order: the listed one, else sorted), named "column", for a
  // model that looks the ids up in an embedding (Gather). Every site must then list the
  // same categories, or its ids mean other things.
  std::string categorical_encoding = "onehot";
  // "error" (default): a missing cell is an error naming the file, line and column;
  // "drop": rows with a missing feature or label are left out; "impute_mean": a missing
  // number becomes NaN, to be replaced by its feature's mean before training
  // (core/data/impute.h), rows with a missing label are left out, and a missing category is
  // an error.
  std::string missing = "error";
};

// Reads and parses the CSV file at `path` (see ParseCsv).
Result<Dataset> ReadCsv(const std::string& path, const CsvOptions& options);

// Parses CSV `text`. `source_name` (a path, or a name in tests) starts every error message.
// Accepted: a UTF-8 byte-order mark, LF or CRLF line ends, a missing or extra final newline,
// blank lines, spaces/tabs around cells. Lines are numbered from 1 (the header) in errors.
Result<Dataset> ParseCsv(std::string_view text, const CsvOptions& options,
                         std::string_view source_name);

}  // namespace fedmesh
