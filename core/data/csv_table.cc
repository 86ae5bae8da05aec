#include "core/data/csv_table.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unordered_map>

namespace fedmesh {

Result<CsvTable> ReadCsvTable(const std::string& path, char delimiter) {
  FM_ASSIGN_OR_RETURN(CsvText text, ReadCsvText(path));
  CsvTable t;
  t.source = path;
  t.delimiter = delimiter;
  t.text = std::make_shared<const CsvText>(std::move(text));
  std::string_view all = t.text->view();
  if (all.substr(0, 3) == "\xEF\xBB\xBF") all.remove_prefix(3);
  size_t pos = 0;
  size_t line_no = 0;
  std::vector<std::string_view> cells;
  while (pos < all.size()) {
    size_t end = all.find('\n', pos);
    if (end == std::string_view::npos) end = all.size();
    std::string_view line = all.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1) {
      if (IsBlankLine(line)) break;
      t.header = line;
      FM_ASSIGN_OR_RETURN(t.names, ParseCsvHeader(line, delimiter, path));
      continue;
    }
    if (IsBlankLine(line)) continue;
    SplitCells(line, delimiter, &cells);
    if (cells.size() != t.names.size()) {
      return Status::Corruption(AtLine(path, line_no) + "has " + std::to_string(cells.size()) +
                                " cells but the header names " + std::to_string(t.names.size()) + " columns");
    }
    t.rows.push_back(line);
    t.line_of_row.push_back(line_no);
  }
  if (t.names.empty()) {
    return Status::Corruption(path + " has no header: line 1 must name the columns");
  }
  return t;
}

Result<std::vector<std::string>> CsvColumn(const CsvTable& table, std::string_view column, bool unique) {
  size_t col = table.names.size();
  std::string available;
  for (size_t c = 0; c < table.names.size(); ++c) {
    if (table.names[c] == column) col = c;
    available += (c > 0 ? ", " : "") + table.names[c];
  }
  if (col == table.names.size()) {
    return Status::InvalidArgument("column " + QuoteCell(column) + " is not in the header of " + table.source +
                                   "; available columns: " + available);
  }
  std::vector<std::string> values;
  values.reserve(table.rows.size());
  std::unordered_map<std::string_view, size_t> first;
  std::vector<std::string_view> cells;
  for (size_t r = 0; r < table.rows.size(); ++r) {
    SplitCells(table.rows[r], table.delimiter, &cells);
    const std::string_view v = cells[col];
    if (v.empty()) {
      return Status::Corruption(AtLine(table.source, table.line_of_row[r]) + "column " + QuoteCell(column) +
                                " is empty; every row needs one");
    }
    if (unique) {
      const auto [it, inserted] = first.emplace(v, r);
      if (!inserted) {
        return Status::Corruption(AtLine(table.source, table.line_of_row[r]) + "column " + QuoteCell(column) +
                                  " value " + QuoteCell(v) + " appears again (first on line " +
                                  std::to_string(table.line_of_row[it->second]) + "); ids must be unique");
      }
    }
    values.emplace_back(v);
  }
  return values;
}

Status WriteCsvRows(const CsvTable& table, std::span<const uint64_t> rows, const std::string& path) {
  for (uint64_t r : rows) {
    if (r >= table.rows.size()) {
      return Status::OutOfRange("row " + std::to_string(r) + " is past the " + std::to_string(table.rows.size()) +
                                " rows of " + table.source);
    }
  }
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return Status::IOError("cannot create " + tmp + ": " + std::strerror(errno));
  std::string buf;
  buf.reserve(1 << 20);
  buf.append(table.header).push_back('\n');
  bool ok = true;
  for (uint64_t r : rows) {
    buf.append(table.rows[r]).push_back('\n');
    if (buf.size() >= (1 << 20)) {
      ok = ok && std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
      buf.clear();
    }
  }
  ok = ok && std::fwrite(buf.data(), 1, buf.size(), f) == buf.size();
  ok = (std::fclose(f) == 0) && ok;
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, path, ec);
  if (!ok || ec) {
    std::filesystem::remove(tmp, ec);
    return Status::IOError("cannot write " + path);
  }
  return Status::OK();
}

}  // namespace fedmesh
