// Splitting a string at a separator, keeping empty pieces ("a||b" -> "a", "", "b"), for the
// small text formats fedmesh parses itself (codec chain names).
// Thread-safety: pure function.
#pragma once

#include <string_view>
#include <vector>

namespace fedmesh {

// The pieces of `s` between occurrences of `sep`; one piece (s itself) when there is none.
// The views point into `s`.
inline std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    if (at == std::string_view::npos) {
      parts.push_back(s.substr(start));
      return parts;
    }
    parts.push_back(s.substr(start, at - start));
    start = at + 1;
  }
}

}  // namespace fedmesh
