// JsonLine: builds one flat JSON object for JSON-lines metrics files. Numbers that are
// not finite are written as null (JSON has no NaN), strings are escaped.
// Thread-safety: a value type; use one per line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fedmesh {

class JsonLine {
 public:
  JsonLine& Add(std::string_view key, double value);
  JsonLine& Add(std::string_view key, int64_t value);
  JsonLine& Add(std::string_view key, int value) { return Add(key, static_cast<int64_t>(value)); }
  JsonLine& Add(std::string_view key, bool value);
  JsonLine& Add(std::string_view key, std::string_view value);
  JsonLine& Add(std::string_view key, const char* value) { return Add(key, std::string_view(value)); }
  // "{...}" without a trailing newline.
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string body_;
};

// Appends `line` and a newline to the file at `path` (created if missing), flushed.
// IOError naming the file when it cannot be opened or written.
Status AppendJsonLine(const std::string& path, const JsonLine& line);

// Appends `s` to `out` as a quoted, escaped JSON string.
void AppendJsonString(std::string& out, std::string_view s);

}  // namespace fedmesh
