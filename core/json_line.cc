#include "core/json_line.h"

#include <cmath>
#include <cstdio>
#include <fstream>

namespace fedmesh {

void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void JsonLine::Key(std::string_view key) {
  if (!body_.empty()) body_ += ',';
  AppendJsonString(body_, key);
  body_ += ':';
}

JsonLine& JsonLine::Add(std::string_view key, double value) {
  Key(key);
  if (!std::isfinite(value)) {
    body_ += "null";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.9g", value);
    body_ += buf;
  }
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, int64_t value) {
  Key(key);
  body_ += std::to_string(value);
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, bool value) {
  Key(key);
  body_ += value ? "true" : "false";
  return *this;
}

JsonLine& JsonLine::Add(std::string_view key, std::string_view value) {
  Key(key);
  AppendJsonString(body_, value);
  return *this;
}

Status AppendJsonLine(const std::string& path, const JsonLine& line) {
  std::ofstream out(path, std::ios::app);
  if (!out) return Status::IOError("cannot open " + path + " for appending");
  out << line.str() << '\n';
  out.flush();
  if (!out) return Status::IOError("cannot write " + path);
  return Status::OK();
}

}  // namespace fedmesh
