// VirtualClockEnv: the Env the simulator and tests hand to protocol state machines. Time is
// a number the driver moves forward (to the next event's timestamp) instead of the wall
// clock, and randomness comes from one seeded Rng, so a 10,000-client run takes seconds and
// the same seed replays it exactly. Thread-safety: one thread (the event loop) advances
// the clock and uses rng(); NowSeconds() may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/env.h"
#include "core/rng.h"

namespace fedmesh {

class VirtualClockEnv final : public Env {
 public:
  // REQUIRES: start_seconds is finite.
  explicit VirtualClockEnv(uint64_t seed, double start_seconds = 0.0);

  // The virtual time: start_seconds until the driver advances it.
  double NowSeconds() const override { return now_.load(std::memory_order_acquire); }
  Rng& rng() override { return rng_; }

  // Sets the time to exactly t (an event's timestamp), so timers due at t see
  // NowSeconds() == t. REQUIRES: t is finite and t >= NowSeconds(): virtual time, like the
  // monotonic clock it stands for, never goes backwards.
  void AdvanceTo(double t);
  // Moves the time forward by dt. REQUIRES: dt is finite and dt >= 0.
  void Advance(double dt);

 private:
  // Seconds as a double rather than integer ticks: AdvanceTo(t) must land on exactly t,
  // which ticks would round. Doubles hold microsecond resolution for ~285 years.
  std::atomic<double> now_;
  Rng rng_;
};

}  // namespace fedmesh
