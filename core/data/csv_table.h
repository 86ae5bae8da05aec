// CsvTable: a CSV file (fedmesh's dialect, core/data/csv_cells.h) kept as whole rows of
// text, for steps that select and reorder records rather than parse features: private set
// intersection reads a table's id column and writes the aligned rows back out unchanged.
// Thread-safety: immutable after ReadCsvTable; concurrent reads are safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/data/csv_cells.h"
#include "core/status.h"

namespace fedmesh {

struct CsvTable {
  std::string source;                 // the path, in error messages
  char delimiter = ',';
  std::shared_ptr<const CsvText> text;  // the rows below point into it
  std::string_view header;            // line 1, as written
  std::vector<std::string> names;     // the header's column names
  std::vector<std::string_view> rows;  // every non-blank data line, in file order
  std::vector<size_t> line_of_row;    // its line number in the file, from 1
};

// Reads `path`. Corruption naming the file and line for a missing header, a bad column
// name, or a row whose cell count differs from the header's; NotFound / IOError for the
// file itself.
Result<CsvTable> ReadCsvTable(const std::string& path, char delimiter = ',');

// The cells of `column`, one per row. InvalidArgument when the header lacks it (listing the
// columns there are); Corruption naming file, line and column for an empty cell, and, when
// `unique`, for a value that appears twice (naming both lines).
Result<std::vector<std::string>> CsvColumn(const CsvTable& table, std::string_view column, bool unique);

// Writes the header and rows[k] for k in `rows` (in that order) to `path`, atomically
// (a temporary file renamed over it). OutOfRange for an index past the table; IOError when
// the file cannot be written.
Status WriteCsvRows(const CsvTable& table, std::span<const uint64_t> rows, const std::string& path);

}  // namespace fedmesh
