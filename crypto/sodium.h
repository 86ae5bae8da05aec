// libsodium start-up. Every fedmesh function that calls libsodium first calls InitSodium(),
// because sodium_init() must run before any other sodium call (it picks the fastest
// implementations and seeds the random source). Thread-safety: InitSodium() may be called
// from any number of threads at once; the library is initialised exactly once.
#pragma once

#include "core/status.h"

namespace fedmesh {

// Initialises libsodium once per process. Returns Internal when libsodium cannot start
// (for example, no entropy source is available); every later call returns the same result.
Status InitSodium();

}  // namespace fedmesh
