#include "core/exit_code.h"

#include <gtest/gtest.h>

namespace fedmesh {
namespace {

// One mapping for every binary: what the user must fix exits 2, a failure while running 1.
TEST(ExitCode, BadInputIsTwoAndRuntimeFailuresOne) {
  EXPECT_EQ(ExitCodeFor(Status::OK()), 0);
  for (const Status& s : {Status::InvalidArgument("k"), Status::NotFound("f"), Status::Corruption("c"),
                          Status::OutOfRange("o"), Status::PermissionDenied("p"), Status::FailedPrecondition("d"),
                          Status::AlreadyExists("a"), Status::Unimplemented("u"), Status::Unavailable("cuda")}) {
    EXPECT_EQ(ExitCodeFor(s), kExitBadInput) << s.ToString();
  }
  for (const Status& s : {Status::IOError("disk"), Status::DeadlineExceeded("late"), Status::Internal("bug")}) {
    EXPECT_EQ(ExitCodeFor(s), kExitRuntime) << s.ToString();
  }
}

}  // namespace
}  // namespace fedmesh
