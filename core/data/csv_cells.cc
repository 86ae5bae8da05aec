#include "core/data/csv_cells.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <cstdint>
#include <cstring>
#include <unordered_map>

namespace fedmesh {

// Trims spaces and tabs, except the delimiter itself (a TSV's tabs are separators).
std::string_view TrimCell(std::string_view s, char delimiter) {
  auto is_space = [delimiter](char c) { return (c == ' ' || c == '\t') && c != delimiter; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Finds the delimiters eight bytes at a time (SWAR): cells are a few bytes long, so a
// find() per cell cost more in calls than in scanning (bench/csv_ingest.sh).
void SplitCells(std::string_view line, char delimiter, std::vector<std::string_view>* cells) {
  cells->clear();
  const char* start = line.data();
  const char* const end = start + line.size();
  const char* p = start;
  auto cell_to = [&](const char* q) {
    cells->push_back(TrimCell(std::string_view(start, static_cast<size_t>(q - start)), delimiter));
    start = q + 1;
  };
  if constexpr (std::endian::native == std::endian::little) {
    constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7FULL;
    const uint64_t pattern = 0x0101010101010101ULL * static_cast<unsigned char>(delimiter);
    for (; end - p >= 8; p += 8) {
      uint64_t word;
      std::memcpy(&word, p, 8);
      const uint64_t x = word ^ pattern;  // zero bytes where the delimiter is
      // The high bit of each zero byte, exactly (no borrow between bytes).
      uint64_t hits = ~(((x & kLow7) + kLow7) | x | kLow7);
      for (; hits != 0; hits &= hits - 1) cell_to(p + std::countr_zero(hits) / 8);
    }
  }
  for (; p != end; ++p) {
    if (*p == delimiter) cell_to(p);
  }
  cells->push_back(TrimCell(std::string_view(start, static_cast<size_t>(end - start)), delimiter));
}

bool IsBlankLine(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t') return false;
  }
  return true;
}

std::string QuoteCell(std::string_view s) {
  // Long cells are cut so one bad cell cannot flood a log line.
  constexpr size_t kMax = 40;
  std::string q = "\"";
  q.append(s.substr(0, kMax));
  if (s.size() > kMax) q += "...";
  q += "\"";
  return q;
}

std::string AtLine(std::string_view source, size_t line) {
  return std::string(source) + " line " + std::to_string(line) + ": ";
}

Result<std::vector<std::string>> ParseCsvHeader(std::string_view line, char delimiter, std::string_view source) {
  std::vector<std::string_view> cells;
  SplitCells(line, delimiter, &cells);
  std::vector<std::string> names(cells.begin(), cells.end());
  std::unordered_map<std::string_view, size_t> column_of;
  for (size_t c = 0; c < names.size(); ++c) {
    if (names[c].empty()) {
      return Status::Corruption(AtLine(source, 1) + "header column " + std::to_string(c + 1) +
                                " has no name; every column needs one");
    }
    if (names[c].front() == '"') {
      return Status::Corruption(AtLine(source, 1) + "header column " + QuoteCell(names[c]) +
                                " is quoted; quoted fields are not supported, remove the quotes");
    }
    const auto [it, inserted] = column_of.emplace(names[c], c);
    if (!inserted) {
      return Status::Corruption(AtLine(source, 1) + "column name " + QuoteCell(names[c]) +
                                " appears twice (columns " + std::to_string(it->second + 1) + " and " +
                                std::to_string(c + 1) + "); rename one");
    }
  }
  return names;
}

Result<CsvText> ReadCsvText(const std::string& path) {
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
  // Read straight into one buffer of the file's size (plus room to notice growth): no
  // chunk copies, no reallocation, no zero fill of memory the read overwrites anyway.
  const uintmax_t size = std::filesystem::file_size(path, ec);
  size_t capacity = (ec ? 0 : static_cast<size_t>(size)) + (1 << 16);
  auto text = std::make_unique_for_overwrite<char[]>(capacity);
  size_t length = 0;
  for (;;) {
    if (length == capacity) {  // the file grew while being read
      auto bigger = std::make_unique_for_overwrite<char[]>(2 * capacity);
      std::memcpy(bigger.get(), text.get(), length);
      text = std::move(bigger);
      capacity *= 2;
    }
    const size_t n = std::fread(text.get() + length, 1, capacity - length, f);
    if (n == 0) break;
    length += n;
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return Status::IOError("reading CSV file " + path + " failed: " + std::strerror(err));
  CsvText out;
  out.bytes = std::move(text);
  out.length = length;
  return out;
}

}  // namespace fedmesh
