#include "core/layer.h"

namespace fedmesh {

size_t ShapeSize(const SampleShape& s) {
  size_t n = 1;
  for (int d : s) n *= static_cast<size_t>(d);
  return n;
}

std::string ShapeToString(const SampleShape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += "x";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

}  // namespace fedmesh
