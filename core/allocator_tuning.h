// Allocator settings for processes that move large messages (the aggregator, nodes, the
// benchmarks). glibc serves every allocation above its mmap threshold (128 KiB, adapting
// up to 32 MiB) with a fresh mmap, so each received model, chunk frame and update buffer
// pays page faults and the kernel's page zeroing on first touch, then an munmap: measured
// at a fifth to a third of a round's transfer time (bench/RESULTS.md, issue 26). Keeping
// large buffers in the heap lets freed memory be reused. The cost: freed memory up to
// `retain_bytes` stays mapped (RSS holds at the peak instead of falling back), which the
// aggregator's own limits already bound.
//
// Thread-safety: call once at startup, before other threads allocate.
#pragma once

#include <cstdint>

namespace fedmesh {

// Serves allocations up to 1 GiB from the heap and keeps up to `retain_bytes` of freed
// heap memory instead of returning it to the OS. Returns false when the C library refused
// (then nothing is guaranteed changed). No-op returning false on non-glibc systems.
bool KeepLargeBuffersInHeap(uint64_t retain_bytes = uint64_t{4} << 30);

}  // namespace fedmesh
