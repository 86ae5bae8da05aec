#include "core/data/csv_reader.h"

#include "core/data/csv_cells.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <unordered_map>
#include <vector>

namespace fedmesh {
namespace {

// Exact powers of ten that a double holds: 10^0 .. 10^22.
constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                             1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                             1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

// The common cell, [-]digits[.digits] with at most 19 digits, a mantissa of at most 2^53,
// by Clinger's fast path: the mantissa and 10^k are exact doubles, so one IEEE division
// gives the correctly rounded value, the same double std::from_chars returns. Anything
// else (exponents, long or odd forms) returns false and goes to std::from_chars.
bool ParseSimpleDecimal(std::string_view s, double* out) {
  const char* p = s.data();
  const char* const end = p + s.size();
  const bool negative = p != end && *p == '-';
  if (negative) ++p;
  uint64_t mantissa = 0;
  int digits = 0;
  const char* const int_start = p;
  for (; p != end && static_cast<unsigned>(*p - '0') < 10; ++p, ++digits)
    mantissa = mantissa * 10 + static_cast<unsigned>(*p - '0');
  if (p == int_start) return false;
  int fraction = 0;
  if (p != end && *p == '.') {
    ++p;
    const char* const frac_start = p;
    for (; p != end && static_cast<unsigned>(*p - '0') < 10; ++p, ++digits)
      mantissa = mantissa * 10 + static_cast<unsigned>(*p - '0');
    fraction = static_cast<int>(p - frac_start);
    if (fraction == 0) return false;
  }
  if (p != end || digits > 19 || fraction > 22 || mantissa > (uint64_t{1} << 53)) return false;
  const double v = static_cast<double>(mantissa) / kPow10[fraction];
  *out = negative ? -v : v;
  return true;
}

// Parses a number (ParseSimpleDecimal, else std::from_chars; unlike strtod neither reads
// the C locale): "1.5" means the same on a German-locale server. A leading '+' is
// accepted for convenience.
// Returns nullptr on success, else why the cell is not acceptable (no std::string per
// cell: this runs for every cell of a table).
const char* ParseNumber(std::string_view cell, double* out) {
  if (cell.empty()) return "is empty; fill in or drop missing values before loading";
  if (cell.front() == '"') {
    return "is quoted; quoted fields are not supported, remove the quotes (and any delimiter "
           "inside the cell)";
  }
  std::string_view s = cell;
  if (s.size() > 1 && s.front() == '+' && s[1] != '-' && s[1] != '+') s.remove_prefix(1);
  double v = 0.0;
  if (!ParseSimpleDecimal(s, &v)) {
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) return "is out of the float32 range";
    if (ec != std::errc() || ptr != s.data() + s.size()) return "is not a number";
  }
  if (std::isnan(v)) return "is NaN; fill in or drop missing values before loading";
  if (std::isinf(v)) return "is infinite; only finite values are accepted";
  if (std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max())) {
    return "is out of the float32 range";
  }
  *out = v;
  return nullptr;
}

// The spellings of a missing value that spreadsheet, R and pandas exports use.
bool IsMissing(std::string_view cell) {
  // Numbers and most categories fail this first test, which is all most cells cost.
  if (cell.size() > 4 || (!cell.empty() && cell[0] != 'N' && cell[0] != 'n' && cell[0] != '?'))
    return false;
  static constexpr std::string_view kMissing[] = {"", "NA", "N/A", "NaN", "nan", "NAN", "null", "NULL", "?"};
  return std::find(std::begin(kMissing), std::end(kMissing), cell) != std::end(kMissing);
}


}  // namespace

Result<Dataset> ParseCsv(std::string_view text, const CsvOptions& options,
                         std::string_view source_name) {
  if (options.unlabeled && (!options.label_column.empty() || !options.label_values.empty() || options.regression)) {
    return Status::InvalidArgument("CsvOptions.unlabeled: " + std::string(source_name) +
                                   " has no label column, so label_column, label_values and regression must be unset");
  }
  if (options.label_column.empty() && !options.unlabeled) {
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
  if (!next_line(&line) || IsBlankLine(line)) {
    return Status::Corruption(std::string(source_name) +
                              " has no header: line 1 must name the columns, e.g. "
                              "\"age,income," +
                              options.label_column + "\"");
  }
  FM_ASSIGN_OR_RETURN(const std::vector<std::string> names, ParseCsvHeader(line, d, source_name));
  const size_t num_columns = names.size();
  std::unordered_map<std::string_view, size_t> column_of;
  for (size_t c = 0; c < num_columns; ++c) column_of.emplace(names[c], c);
  std::vector<std::string_view> cells;
  auto available = [&] {
    std::string a;
    for (size_t c = 0; c < num_columns; ++c) a += (c > 0 ? ", " : "") + names[c];
    return a;
  };
  const auto label_it = column_of.find(options.label_column);
  if (label_it == column_of.end() && !options.unlabeled) {
    return Status::InvalidArgument("label column " + QuoteCell(options.label_column) +
                                   " is not in the header of " + std::string(source_name) +
                                   "; available columns: " + available());
  }
  const size_t label_col = options.unlabeled ? num_columns : label_it->second;  // num_columns: none

  // The feature columns, in output order.
  std::vector<size_t> feature_cols;
  if (options.features.empty()) {
    for (size_t c = 0; c < num_columns; ++c)
      if (c != label_col) feature_cols.push_back(c);
  } else {
    std::vector<bool> seen(num_columns, false);
    for (const std::string& f : options.features) {
      const auto it = column_of.find(f);
      if (it == column_of.end()) {
        return Status::InvalidArgument("feature column " + QuoteCell(f) + " is not in the header of " +
                                       std::string(source_name) + "; available columns: " +
                                       available());
      }
      if (it->second == label_col || seen[it->second]) {
        return Status::InvalidArgument("feature column " + QuoteCell(f) + " is " +
                                       (it->second == label_col ? "the label column"
                                                                : "listed twice") +
                                       " in the features of " + std::string(source_name));
      }
      seen[it->second] = true;
      feature_cols.push_back(it->second);
    }
  }
  if (feature_cols.empty()) {
    return Status::Corruption(std::string(source_name) +
                              " has only the label column; at least one feature column is needed");
  }
  // Categorical columns: their position among the features, and their fixed categories.
  std::vector<int> category_slot(num_columns, -1);  // column -> index into vocab
  std::vector<std::vector<std::string>> fixed(options.categorical.size());
  for (size_t k = 0; k < options.categorical.size(); ++k) {
    const std::string& name = options.categorical[k];
    const auto it = column_of.find(name);
    if (it == column_of.end() ||
        std::find(feature_cols.begin(), feature_cols.end(), it->second) == feature_cols.end()) {
      return Status::InvalidArgument("categorical column " + QuoteCell(name) + " is not " +
                                     (it == column_of.end() ? "in the header" : "a feature") +
                                     " of " + std::string(source_name) +
                                     "; available columns: " + available());
    }
    if (category_slot[it->second] >= 0) {
      return Status::InvalidArgument("categorical column " + QuoteCell(name) + " is listed twice");
    }
    category_slot[it->second] = static_cast<int>(k);
  }
  for (const std::string& spec : options.categories) {
    const size_t eq = spec.find('=');
    const std::string name = spec.substr(0, eq);
    const auto it = column_of.find(name);
    if (eq == std::string::npos || it == column_of.end() || category_slot[it->second] < 0) {
      return Status::InvalidArgument(
          "categories entry " + QuoteCell(spec) +
          " must read \"column=a,b,c\" for a column listed as categorical");
    }
    std::vector<std::string>& list = fixed[static_cast<size_t>(category_slot[it->second])];
    std::string_view rest = std::string_view(spec).substr(eq + 1);
    while (true) {
      const size_t comma = rest.find(',');
      list.emplace_back(TrimCell(rest.substr(0, comma), ','));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    std::vector<std::string> sorted = list;
    std::sort(sorted.begin(), sorted.end());
    if (list.empty() || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() ||
        sorted.front().empty()) {
      return Status::InvalidArgument("categories entry " + QuoteCell(spec) +
                                     " needs distinct, non-empty categories");
    }
  }
  for (const std::string& v : options.label_values) {
    if (v.empty() || std::count(options.label_values.begin(), options.label_values.end(), v) > 1)
      return Status::InvalidArgument("label_values must be distinct and non-empty");
  }
  if (options.regression && !options.label_values.empty()) {
    return Status::InvalidArgument("label_values are for classes; a regression target is a number");
  }
  if (options.categorical_encoding != "onehot" && options.categorical_encoding != "ids") {
    return Status::InvalidArgument("categorical_encoding must be \"onehot\" or \"ids\", got " +
                                   QuoteCell(options.categorical_encoding));
  }
  if (options.missing != "error" && options.missing != "drop" && options.missing != "impute_mean") {
    return Status::InvalidArgument("missing must be \"error\", \"drop\" or \"impute_mean\", got " +
                                   QuoteCell(options.missing));
  }
  const bool drop_missing = options.missing == "drop";
  const bool impute = options.missing == "impute_mean";
  const int label_count = static_cast<int>(options.label_values.size());
  if (label_count > 0 && options.num_classes > 0 && options.num_classes != label_count) {
    return Status::InvalidArgument("num_classes " + std::to_string(options.num_classes) +
                                   " differs from the " + std::to_string(label_count) +
                                   " label_values");
  }

  // Category ids in first-seen order while reading (fixed lists: their order), renumbered
  // to sorted order at the end, so the encoding does not depend on row order.
  // Keys view the fixed lists or the text itself (both outlive the map): no string per cell.
  std::vector<std::unordered_map<std::string_view, int>> vocab(options.categorical.size());
  for (size_t k = 0; k < fixed.size(); ++k)
    for (size_t i = 0; i < fixed[k].size(); ++i) vocab[k].emplace(fixed[k][i], static_cast<int>(i));

  Dataset ds;
  // Rows are read into `raw` (one value per feature column; a category's id as a float),
  // expanded into one-hot columns once every category is known.
  std::vector<float> raw;
  // Counted with memchr, which is vectorised; std::count here was a byte loop.
  size_t approx_rows = 1;
  for (const char *p = text.data() + std::min(pos, text.size()), *end = text.data() + text.size();
       (p = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)))) != nullptr;
       ++p)
    ++approx_rows;
  ds.labels.reserve(approx_rows);
  raw.reserve(approx_rows * feature_cols.size());
  std::vector<float> row(feature_cols.size());

  int32_t max_label = -1, min_label = std::numeric_limits<int32_t>::max();
  while (next_line(&line)) {
    if (IsBlankLine(line)) continue;
    SplitCells(line, d, &cells);
    if (cells.size() != num_columns) {
      return Status::Corruption(AtLine(source_name, line_no) + "expected " +
                                std::to_string(num_columns) + " fields (as in the header), got " +
                                std::to_string(cells.size()));
    }
    auto missing_error = [&](size_t c) {
      return Status::Corruption(AtLine(source_name, line_no) + "cell " + QuoteCell(cells[c]) +
                                " in column " + QuoteCell(names[c]) +
                                " is missing (empty, NA, NaN, null or ?); fill it in, or set "
                                "missing = \"drop\" to leave such rows out");
    };
    bool drop = false;
    for (size_t j = 0; j < feature_cols.size() && !drop; ++j) {
      const size_t c = feature_cols[j];
      if (IsMissing(cells[c])) {
        if (impute && category_slot[c] < 0) {
          row[j] = std::numeric_limits<float>::quiet_NaN();  // imputed before training
          continue;
        }
        if (impute) {
          return Status::Corruption(AtLine(source_name, line_no) + "category cell in column " +
                                    QuoteCell(names[c]) + " is missing; a category has no mean: "
                                    "fill it in, or use missing = \"drop\"");
        }
        if (!drop_missing) return missing_error(c);
        drop = true;
        break;
      }
      if (const int k = category_slot[c]; k >= 0) {
        const std::string_view value = cells[c];
        auto it = vocab[k].find(value);
        if (it == vocab[k].end()) {
          if (!fixed[k].empty()) {
            std::string listed;
            for (const std::string& v : fixed[k]) listed += (listed.empty() ? "" : ", ") + v;
            return Status::Corruption(AtLine(source_name, line_no) + "category " + QuoteCell(value) +
                                      " in column " + QuoteCell(names[c]) +
                                      " is not one of the listed categories: " + listed);
          }
          it = vocab[k].emplace(value, static_cast<int>(vocab[k].size())).first;
        }
        row[j] = static_cast<float>(it->second);
        continue;
      }
      double v = 0.0;
      if (const char* why = ParseNumber(cells[c], &v); why != nullptr) {
        return Status::Corruption(AtLine(source_name, line_no) + "cell " + QuoteCell(cells[c]) +
                                  " in column " + QuoteCell(names[c]) + " " + why +
                                  (cells[c].size() > 0 && !std::isdigit(static_cast<unsigned char>(cells[c][0])) &&
                                           cells[c][0] != '-' && cells[c][0] != '.'
                                       ? "; list text columns in categorical"
                                       : ""));
      }
      row[j] = static_cast<float>(v);
    }
    const std::string_view label_cell = options.unlabeled ? std::string_view("0") : cells[label_col];
    if (!drop && IsMissing(label_cell)) {
      if (!drop_missing && !impute) return missing_error(label_col);  // labels are never imputed
      drop = true;
    }
    if (drop) continue;
    int32_t label = 0;
    if (label_count > 0) {
      const auto it = std::find(options.label_values.begin(), options.label_values.end(),
                                label_cell);
      if (it == options.label_values.end()) {
        std::string listed;
        for (const std::string& v : options.label_values) listed += (listed.empty() ? "" : ", ") + v;
        return Status::Corruption(AtLine(source_name, line_no) + "label " + QuoteCell(label_cell) +
                                  " in column " + QuoteCell(names[label_col]) +
                                  " is not one of the label_values: " + listed);
      }
      label = static_cast<int32_t>(it - options.label_values.begin());
    } else {
      double v = 0.0;
      const char* error = ParseNumber(label_cell, &v);
      std::string why = error != nullptr ? error : "";
      if (options.regression) {
        if (!why.empty()) {
          return Status::Corruption(AtLine(source_name, line_no) + "target " + QuoteCell(label_cell) +
                                    " in column " + QuoteCell(names[label_col]) + " " + why);
        }
        ds.targets.push_back(static_cast<float>(v));
      } else {
        if (why.empty() && (v < 0.0 || v != std::floor(v) || v > kMaxCsvLabel)) {
          why = v > kMaxCsvLabel && v == std::floor(v)
                    ? "is larger than " + std::to_string(kMaxCsvLabel) + "; remap labels to 0..K-1"
                    : "is not a non-negative integer; labels must be class indices 0, 1, 2, ...";
        } else if (!why.empty() && why == "is not a number") {
          why = "is not a class index 0, 1, 2, ...; for text labels list them in class order "
                "in label_values";
        }
        if (!why.empty()) {
          return Status::Corruption(AtLine(source_name, line_no) + "label " + QuoteCell(label_cell) +
                                    " in column " + QuoteCell(names[label_col]) + " " + why);
        }
        label = static_cast<int32_t>(v);
      }
    }
    if (!options.regression && options.num_classes > 0 && label >= options.num_classes) {
      return Status::Corruption(AtLine(source_name, line_no) + "label " + std::to_string(label) +
                                " in column " + QuoteCell(names[label_col]) + " is >= num_classes " +
                                std::to_string(options.num_classes) +
                                "; raise num_classes or fix the label");
    }
    max_label = std::max(max_label, label);
    min_label = std::min(min_label, label);
    ds.labels.push_back(options.regression ? 0 : label);
    raw.insert(raw.end(), row.begin(), row.end());
  }
  if (ds.labels.empty()) {
    return Status::Corruption(std::string(source_name) +
                              (drop_missing ? " has no data rows without missing values"
                                            : " has a header but no data rows") +
                              "; add at least one sample");
  }

  // Sorted category order (fixed lists keep theirs): old id -> new id, and the names.
  std::vector<std::vector<int>> renumber(vocab.size());
  std::vector<std::vector<std::string>> category_names(vocab.size());
  for (size_t k = 0; k < vocab.size(); ++k) {
    std::vector<std::pair<std::string, int>> entries;
    for (const auto& [name, id] : vocab[k]) entries.emplace_back(std::string(name), id);
    if (fixed[k].empty()) {
      std::sort(entries.begin(), entries.end());
    } else {
      std::sort(entries.begin(), entries.end(),
                [](const auto& a, const auto& b) { return a.second < b.second; });
    }
    renumber[k].resize(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      renumber[k][static_cast<size_t>(entries[i].second)] = static_cast<int>(i);
      category_names[k].push_back(entries[i].first);
    }
  }
  const bool ids = options.categorical_encoding == "ids";
  for (size_t c : feature_cols) {
    if (const int k = category_slot[c]; k >= 0 && !ids) {
      for (const std::string& v : category_names[static_cast<size_t>(k)])
        ds.feature_names.push_back(names[c] + "=" + v);
    } else {
      ds.feature_names.push_back(names[c]);
    }
  }
  const size_t width = ds.feature_names.size();
  const size_t n = ds.labels.size();
  if (options.categorical.empty()) {
    ds.features = std::move(raw);
  } else {
    ds.features.assign(n * width, 0.0f);
    for (size_t r = 0; r < n; ++r) {
      float* out = ds.features.data() + r * width;
      const float* in = raw.data() + r * feature_cols.size();
      size_t o = 0;
      for (size_t j = 0; j < feature_cols.size(); ++j) {
        const int k = category_slot[feature_cols[j]];
        if (k < 0) {
          out[o++] = in[j];
          continue;
        }
        const std::vector<int>& id_of = renumber[static_cast<size_t>(k)];
        const int id = id_of[static_cast<size_t>(in[j])];
        if (ids) {
          out[o++] = static_cast<float>(id);
        } else {
          out[o + static_cast<size_t>(id)] = 1.0f;
          o += id_of.size();
        }
      }
    }
  }
  ds.sample_shape = {static_cast<int>(width)};
  if (options.regression) {
    ds.num_classes = 1;
    ds.target_dim = 1;
  } else {
    ds.num_classes = options.num_classes > 0 ? options.num_classes
                     : label_count > 0       ? label_count
                                             : max_label + 1;
    if (options.unlabeled) ds.num_classes = 0;
    // Classes inferred from one distinct label say nothing about the others.
    if (!options.unlabeled && options.num_classes == 0 && label_count == 0 && min_label == max_label) {
      return Status::Corruption(std::string(source_name) + ": label column " +
                                QuoteCell(names[label_col]) + " holds a single class (" +
                                std::to_string(max_label) +
                                "); a classifier needs two or more (set num_classes when this "
                                "site lacks the others)");
    }
  }
  return ds;
}

Result<Dataset> ReadCsv(const std::string& path, const CsvOptions& options) {
  FM_ASSIGN_OR_RETURN(CsvText text, ReadCsvText(path));
  return ParseCsv(text.view(), options, path);
}

}  // namespace fedmesh
