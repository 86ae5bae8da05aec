#include "crypto/sodium.h"

#include <sodium.h>

#include <mutex>

namespace fedmesh {

Status InitSodium() {
  // sodium_init() is itself idempotent, but call_once also gives every caller the same
  // answer and makes the happens-before edge explicit for code that runs right after.
  static std::once_flag once;
  static Status result;
  std::call_once(once, [] {
    // 0: initialised now; 1: already initialised (by another library in the process).
    if (sodium_init() < 0) {
      result = Status::Internal(
          "libsodium failed to initialise (sodium_init() < 0); check that /dev/urandom or "
          "getrandom() is available to this process");
    }
  });
  return result;
}

}  // namespace fedmesh
