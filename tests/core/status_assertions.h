// HasCode: a GoogleTest assertion that a Status has the expected code and, optionally, a
// message containing `needle`; on failure it prints both, on success the message itself.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "core/status.h"

namespace fedmesh::testing {

inline ::testing::AssertionResult HasCode(const Status& s, StatusCode code,
                                          std::string_view needle = "") {
  if (s.code() != code) {
    return ::testing::AssertionFailure()
           << "expected " << StatusCodeName(code) << ", got " << s.ToString();
  }
  if (!needle.empty() && s.message().find(needle) == std::string::npos) {
    return ::testing::AssertionFailure() << "message lacks \"" << needle << "\": " << s.ToString();
  }
  return ::testing::AssertionSuccess() << s.ToString();
}

}  // namespace fedmesh::testing
