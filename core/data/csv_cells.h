// The CSV dialect fedmesh reads (core/data/csv_reader.h): cells split at a delimiter, no
// quoting, spaces and tabs around cells trimmed, a header naming every column once. The
// pieces shared by the feature reader and the row-level table (core/data/csv_table.h).
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fedmesh {

// Trims spaces and tabs, except the delimiter itself (a TSV's tabs are separators).
std::string_view TrimCell(std::string_view s, char delimiter);
// Splits `line` at `delimiter` into trimmed cells (views into line).
void SplitCells(std::string_view line, char delimiter, std::vector<std::string_view>* cells);
// Whether the line holds only spaces and tabs.
bool IsBlankLine(std::string_view line);
// `s` in double quotes, cut at 40 characters so one bad cell cannot flood a log line.
std::string QuoteCell(std::string_view s);
// "SOURCE line N: ", the start of every error about a line.
std::string AtLine(std::string_view source, size_t line);
// The column names of header `line` (line 1 of `source`). Corruption naming the column for
// an empty name, a quoted one, or a name that appears twice.
Result<std::vector<std::string>> ParseCsvHeader(std::string_view line, char delimiter, std::string_view source);

// A whole file's bytes, read into one buffer of its size (no zero fill, no chunk copies).
struct CsvText {
  std::unique_ptr<char[]> bytes;
  size_t length = 0;
  std::string_view view() const { return {bytes.get(), length}; }
};
// NotFound when `path` does not exist, InvalidArgument when it is not a regular file,
// IOError when it cannot be read.
Result<CsvText> ReadCsvText(const std::string& path);

}  // namespace fedmesh
