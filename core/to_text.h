// ToText: any value with an operator<< as the text the stream writes (a double as "0.25",
// not std::to_string's "0.250000"), for error messages.
// Thread-safety: pure function.
#pragma once

#include <sstream>
#include <string>

namespace fedmesh {

template <typename T>
std::string ToText(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace fedmesh
