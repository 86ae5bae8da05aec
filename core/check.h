// Programmer-error checks (gloo's ENFORCE style): on failure they print both operand
// values with file:line and abort. Use them for invariants the code itself must hold;
// anything a user, a file or the network can cause returns a Status instead.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace fedmesh::internal {

[[noreturn]] inline void CheckFailed(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what.c_str());
  std::fflush(stderr);
  std::abort();
}

template <typename A, typename B>
std::string BinaryCheckMessage(const char* expr, const A& a, const B& b) {
  std::ostringstream os;
  os << expr << " (" << a << " vs " << b << ")";
  return os.str();
}

}  // namespace fedmesh::internal

#define FM_CHECK(cond) \
  do { if (!(cond)) ::fedmesh::internal::CheckFailed(__FILE__, __LINE__, #cond); } while (0)

#define FM_CHECK_OP(op, a, b)                                                             \
  do {                                                                                    \
    const auto& fm_a_ = (a);                                                              \
    const auto& fm_b_ = (b);                                                              \
    if (!(fm_a_ op fm_b_))                                                                \
      ::fedmesh::internal::CheckFailed(                                                   \
          __FILE__, __LINE__,                                                             \
          ::fedmesh::internal::BinaryCheckMessage(#a " " #op " " #b, fm_a_, fm_b_));      \
  } while (0)

#define FM_CHECK_EQ(a, b) FM_CHECK_OP(==, a, b)
#define FM_CHECK_NE(a, b) FM_CHECK_OP(!=, a, b)
#define FM_CHECK_LT(a, b) FM_CHECK_OP(<, a, b)
#define FM_CHECK_LE(a, b) FM_CHECK_OP(<=, a, b)
#define FM_CHECK_GT(a, b) FM_CHECK_OP(>, a, b)
#define FM_CHECK_GE(a, b) FM_CHECK_OP(>=, a, b)
