// How fedmesh's binaries end, the same for all of them: 0 done, 1 a failure while running
// (a peer gone, a store that cannot be written, a run that diverged on its own), 2 bad input
// (a config key, a flag, a data, model or key file, a device that is not there): what the
// user must change before running again. Thread-safety: a pure function.
#pragma once

#include "core/status.h"

namespace fedmesh {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitBadInput = 2;

// kExitBadInput for the codes fedmesh returns for bad input (InvalidArgument, NotFound,
// Corruption, OutOfRange, PermissionDenied, FailedPrecondition, AlreadyExists,
// Unimplemented, Unavailable: a requested device that is absent), kExitOk for OK,
// kExitRuntime for the rest.
int ExitCodeFor(const Status& s);

}  // namespace fedmesh
