#include "core/allocator_tuning.h"

#include <algorithm>
#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace fedmesh {

bool KeepLargeBuffersInHeap(uint64_t retain_bytes) {
#if defined(__GLIBC__)
  const int retain = static_cast<int>(std::min<uint64_t>(retain_bytes, INT_MAX));
  bool ok = mallopt(M_MMAP_THRESHOLD, 1 << 30) == 1;
  ok = mallopt(M_TRIM_THRESHOLD, retain) == 1 && ok;
  // Grow the heap in large steps: fewer brk calls while a round's uploads arrive.
  ok = mallopt(M_TOP_PAD, 64 << 20) == 1 && ok;
  return ok;
#else
  (void)retain_bytes;
  return false;
#endif
}

}  // namespace fedmesh
