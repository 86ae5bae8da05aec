#include "core/gnuplot.h"

#include <cstdio>

namespace fedmesh {

std::string GnuplotQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

Status RunGnuplot(const std::string& script_path) {
  const std::string command = "gnuplot " + GnuplotQuote(script_path) + " 2>&1";
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return Status::FailedPrecondition("cannot run gnuplot");
  std::string output;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) output.append(buf, n);
  const int rc = pclose(p);
  if (rc != 0) {
    return Status::FailedPrecondition(
        "gnuplot failed (install Debian's gnuplot-nox): " +
        (output.empty() ? std::string("exit status ") + std::to_string(rc) : output));
  }
  return Status::OK();
}

}  // namespace fedmesh
