// CSV reader for tabular sites (a bank's transactions, a hospital's lab values): one
// header line naming the columns, then one sample per line. The column named by
// CsvOptions::label_column holds integer class labels; every other column is a float32
// feature, in file order, giving sample_shape {num_features}. The dialect is deliberately
// small (no quoting, no missing values) so that what is accepted is unambiguous; anything
// else is rejected with the line number and what to change.
// Error codes: InvalidArgument for bad options (including a label column the file lacks),
// NotFound / IOError for the file itself, Corruption for malformed content.
// Thread-safety: stateless; concurrent calls are safe.
#pragma once

#include <string>
#include <string_view>

#include "core/data/dataset.h"
#include "core/status.h"

namespace fedmesh {

// Labels above this are refused: inferring num_classes from them would allocate per-class
// tables of that size, and real class indices are small. Remap larger codes to 0..K-1.
inline constexpr int kMaxCsvLabel = 65535;

struct CsvOptions {
  // Name of the label column, as written in the header. Required (no default).
  std::string label_column;
  // Field separator. Default ','; use '\t' for TSV. '"', '\r' and '\n' are not allowed.
  char delimiter = ',';
  // Number of classes. Default 0: inferred as the largest label + 1. When > 0, a label
  // >= num_classes is an error; set it when a site may lack the highest classes, so that
  // every site agrees on the model's output size.
  int num_classes = 0;
};

// Reads and parses the CSV file at `path` (see ParseCsv).
Result<Dataset> ReadCsv(const std::string& path, const CsvOptions& options);

// Parses CSV `text`. `source_name` (a path, or a name in tests) starts every error message.
// Accepted: a UTF-8 byte-order mark, LF or CRLF line ends, a missing or extra final newline,
// blank lines, spaces/tabs around cells. Lines are numbered from 1 (the header) in errors.
Result<Dataset> ParseCsv(std::string_view text, const CsvOptions& options,
                         std::string_view source_name);

}  // namespace fedmesh
