// Env: the one place fedmesh code reads time and randomness (LevelDB's Env idea).
// Protocol state machines and trainers take an Env&, so the binaries pass SystemEnv (the
// monotonic wall clock) while the simulator and tests pass a virtual clock and a seed,
// and replay any run exactly. Thread-safety: NowSeconds() is safe from any thread on
// SystemEnv; the Rng returned by rng() belongs to the caller's thread of control.
#pragma once

#include <chrono>
#include <cstdint>

#include "core/rng.h"

namespace fedmesh {

class Env {
 public:
  virtual ~Env() = default;
  // Seconds on a monotonic clock; only differences are meaningful.
  virtual double NowSeconds() const = 0;
  // The seeded generator for this Env's owner.
  virtual Rng& rng() = 0;
};

// The real monotonic clock and a generator seeded by the caller.
class SystemEnv final : public Env {
 public:
  explicit SystemEnv(uint64_t seed) : rng_(seed) {}
  double NowSeconds() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  Rng& rng() override { return rng_; }

 private:
  Rng rng_;
};

// Time from another Env (or none: always 0), randomness from its own seeded Rng: for work
// whose random choices must be a pure function of a seed (a node's round of training)
// while the clock stays the caller's.
class SeededEnv final : public Env {
 public:
  SeededEnv(const Env* clock, uint64_t seed) : clock_(clock), rng_(seed) {}
  double NowSeconds() const override { return clock_ != nullptr ? clock_->NowSeconds() : 0.0; }
  Rng& rng() override { return rng_; }

 private:
  const Env* clock_;
  Rng rng_;
};

}  // namespace fedmesh
