#include "sim/virtual_clock_env.h"

#include <cmath>

#include "core/check.h"

namespace fedmesh {

VirtualClockEnv::VirtualClockEnv(uint64_t seed, double start_seconds)
    : now_(start_seconds), rng_(seed) {
  FM_CHECK(std::isfinite(start_seconds));
}

void VirtualClockEnv::AdvanceTo(double t) {
  FM_CHECK(std::isfinite(t));
  // Only the event-loop thread writes, so load-check-store needs no compare-exchange.
  FM_CHECK_GE(t, now_.load(std::memory_order_relaxed));
  now_.store(t, std::memory_order_release);
}

void VirtualClockEnv::Advance(double dt) {
  FM_CHECK(std::isfinite(dt));
  FM_CHECK_GE(dt, 0.0);
  now_.store(now_.load(std::memory_order_relaxed) + dt, std::memory_order_release);
}

}  // namespace fedmesh
