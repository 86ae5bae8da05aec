#include "core/data/csv_reader.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace fedmesh {
namespace {

// Trims spaces and tabs, except the delimiter itself (a TSV's tabs are separators).
std::string_view Trim(std::string_view s, char delimiter) {
  auto is_space = [delimiter](char c) { return (c == ' ' || c == '\t') && c != delimiter; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

void SplitCells(std::string_view line, char delimiter, std::vector<std::string_view>* cells) {
  cells->clear();
  size_t start = 0;
  for (;;) {
    const size_t pos = line.find(delimiter, start);
    if (pos == std::string_view::npos) {
      cells->push_back(Trim(line.substr(start), delimiter));
      return;
    }
    cells->push_back(Trim(line.substr(start, pos - start), delimiter));
    start = pos + 1;
  }
}

bool IsBlank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t') return false;
  }
  return true;
}

std::string Quote(std::string_view s) {
  // Long cells are cut so one bad cell cannot flood a log line.
  constexpr size_t kMax = 40;
  std::string q = "\"";
  q.append(s.substr(0, kMax));
  if (s.size() > kMax) q += "...";
  q += "\"";
  return q;
}

// Parses a number with std::from_chars, which unlike strtod ignores the C locale: "1.5"
// means the same on a German-locale server. A leading '+' is accepted for convenience.
// Returns an empty string on success, else why the cell is not acceptable.
std::string ParseNumber(std::string_view cell, double* out) {
  if (cell.empty()) return "is empty; fill in or drop missing values before loading";
  if (cell.front() == '"') {
    return "is quoted; quoted fields are not supported, remove the quotes (and any delimiter "
           "inside the cell)";
  }
  std::string_view s = cell;
  if (s.size() > 1 && s.front() == '+' && s[1] != '-' && s[1] != '+') s.remove_prefix(1);
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) return "is out of the float32 range";
  if (ec != std::errc() || ptr != s.data() + s.size()) return "is not a number";
  if (std::isnan(v)) return "is NaN; fill in or drop missing values before loading";
  if (std::isinf(v)) return "is infinite; only finite values are accepted";
  if (std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max())) {
    return "is out of the float32 range";
  }
  *out = v;
  return "";
}

std::string At(std::string_view source, size_t line) {
  return std::string(source) + " line " + std::to_string(line) + ": ";
}

}  // namespace

Result<Dataset> ParseCsv(std::string_view text, const CsvOptions& options,
                         std::string_view source_name) {
  if (options.label_column.empty()) {
    return Status::InvalidArgument("CsvOptions.label_column is empty; name the column of " +
                                   std::string(source_name) + " that holds the labels");
  }
  const char d = options.delimiter;
  if (d == '"' || d == '\n' || d == '\r' || d == '\0') {
    return Status::InvalidArgument(
        "CsvOptions.delimiter cannot be a quote, NUL or line break; "
        "use ',' or '\\t'");
  }
  if (options.num_classes < 0 || options.num_classes > kMaxCsvLabel + 1) {
    return Status::InvalidArgument("CsvOptions.num_classes must be in 0.." +
                                   std::to_string(kMaxCsvLabel + 1) + " (0 infers it), got " +
                                   std::to_string(options.num_classes));
  }

  // Spreadsheet exports often start with a UTF-8 byte-order mark; it is not part of the name.
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);

  size_t pos = 0;
  size_t line_no = 0;
  // Returns the next line without its "\n" / "\r\n"; false at the end of the text.
  auto next_line = [&](std::string_view* line) {
    if (pos >= text.size()) return false;
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    *line = text.substr(pos, end - pos);
    if (!line->empty() && line->back() == '\r') line->remove_suffix(1);
    pos = end + 1;
    ++line_no;
    return true;
  };

  std::string_view line;
  if (!next_line(&line) || IsBlank(line)) {
    return Status::Corruption(std::string(source_name) +
                              " has no header: line 1 must name the columns, e.g. "
                              "\"age,income," +
                              options.label_column + "\"");
  }
  std::vector<std::string_view> cells;
  SplitCells(line, d, &cells);
  const size_t num_columns = cells.size();
  std::vector<std::string> names(cells.begin(), cells.end());
  std::unordered_map<std::string_view, size_t> column_of;
  for (size_t c = 0; c < num_columns; ++c) {
    if (names[c].empty()) {
      return Status::Corruption(At(source_name, 1) + "header column " + std::to_string(c + 1) +
                                " has no name; every column needs one");
    }
    if (names[c].front() == '"') {
      return Status::Corruption(At(source_name, 1) + "header column " + Quote(names[c]) +
                                " is quoted; quoted fields are not supported, remove the quotes");
    }
    const auto [it, inserted] = column_of.emplace(names[c], c);
    if (!inserted) {
      return Status::Corruption(At(source_name, 1) + "column name " + Quote(names[c]) +
                                " appears twice (columns " + std::to_string(it->second + 1) +
                                " and " + std::to_string(c + 1) + "); rename one");
    }
  }
  const auto label_it = column_of.find(options.label_column);
  if (label_it == column_of.end()) {
    std::string available;
    for (size_t c = 0; c < num_columns; ++c) {
      if (c > 0) available += ", ";
      available += names[c];
    }
    return Status::InvalidArgument("label column " + Quote(options.label_column) +
                                   " is not in the header of " + std::string(source_name) +
                                   "; available columns: " + available);
  }
  const size_t label_col = label_it->second;
  if (num_columns < 2) {
    return Status::Corruption(std::string(source_name) +
                              " has only the label column; at least one feature column is needed");
  }
  const size_t num_features = num_columns - 1;

  Dataset ds;
  ds.sample_shape = {static_cast<int>(num_features)};
  // One pass to count lines lets us reserve once instead of reallocating large buffers.
  const size_t approx_rows =
      static_cast<size_t>(std::count(text.begin() + pos, text.end(), '\n')) + 1;
  ds.labels.reserve(approx_rows);
  ds.features.reserve(approx_rows * num_features);

  int32_t max_label = -1;
  while (next_line(&line)) {
    if (IsBlank(line)) continue;
    SplitCells(line, d, &cells);
    if (cells.size() != num_columns) {
      return Status::Corruption(At(source_name, line_no) + "expected " +
                                std::to_string(num_columns) + " fields (as in the header), got " +
                                std::to_string(cells.size()));
    }
    for (size_t c = 0; c < num_columns; ++c) {
      double v = 0.0;
      std::string why = ParseNumber(cells[c], &v);
      if (c == label_col) {
        if (why.empty() && (v < 0.0 || v != std::floor(v) || v > kMaxCsvLabel)) {
          why = v > kMaxCsvLabel && v == std::floor(v)
                    ? "is larger than " + std::to_string(kMaxCsvLabel) + "; remap labels to 0..K-1"
                    : "is not a non-negative integer; labels must be class indices 0, 1, 2, ...";
        }
        if (!why.empty()) {
          return Status::Corruption(At(source_name, line_no) + "label " + Quote(cells[c]) +
                                    " in column " + Quote(names[c]) + " " + why);
        }
        const auto label = static_cast<int32_t>(v);
        if (options.num_classes > 0 && label >= options.num_classes) {
          return Status::Corruption(At(source_name, line_no) + "label " + std::to_string(label) +
                                    " in column " + Quote(names[c]) + " is >= num_classes " +
                                    std::to_string(options.num_classes) +
                                    "; raise num_classes or fix the label");
        }
        max_label = std::max(max_label, label);
        ds.labels.push_back(label);
      } else {
        if (!why.empty()) {
          return Status::Corruption(At(source_name, line_no) + "cell " + Quote(cells[c]) +
                                    " in column " + Quote(names[c]) + " " + why);
        }
        ds.features.push_back(static_cast<float>(v));
      }
    }
  }
  if (ds.labels.empty()) {
    return Status::Corruption(std::string(source_name) +
                              " has a header but no data rows; add at least one sample");
  }
  ds.num_classes = options.num_classes > 0 ? options.num_classes : max_label + 1;
  return ds;
}

Result<Dataset> ReadCsv(const std::string& path, const CsvOptions& options) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found) {
    return Status::NotFound("CSV file " + path + " does not exist");
  }
  if (ec) return Status::IOError("cannot inspect CSV file " + path + ": " + ec.message());
  if (st.type() != std::filesystem::file_type::regular) {
    return Status::InvalidArgument(path + " is not a regular file; pass the path of a CSV file");
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Status::IOError("cannot open CSV file " + path + ": " + std::strerror(errno));
  }
  std::string text;
  char buf[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return Status::IOError("reading CSV file " + path + " failed: " + std::strerror(err));
  return ParseCsv(text, options, path);
}

}  // namespace fedmesh
