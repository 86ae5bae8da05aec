#include "core/exit_code.h"

namespace fedmesh {

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
    case StatusCode::kCorruption:
    case StatusCode::kOutOfRange:
    case StatusCode::kPermissionDenied:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAlreadyExists:
    case StatusCode::kUnimplemented:
    case StatusCode::kUnavailable:
      return kExitBadInput;
    default:
      return kExitRuntime;
  }
}

}  // namespace fedmesh
