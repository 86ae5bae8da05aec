// Byzantine-robust aggregation: strategies whose result a minority of arbitrary (malicious
// or broken) updates cannot drag far, for federations that cannot trust every site.
//   median        coordinate-wise median (Yin et al. 2018); the mean of the two middle
//                 values when the count is even
//   trimmed_mean  per coordinate, drop the floor(trim_fraction * n) smallest and largest
//                 values and average the rest (Yin et al. 2018)
//   krum          the single update whose summed squared distance to its n - f - 2 nearest
//                 others is smallest (Blanchard et al. 2017)
//   multikrum     the plain mean of the multikrum_select (default n - f) best-scored ones
// They weigh every update equally: an attacker could inflate num_examples, so it is not
// trusted here. Ties (equal Krum scores) go to the earlier update; the engine passes updates
// ordered by node id, so results are deterministic.
// Thread-safety: one thread of control (Aggregate records which updates Krum selected).
// Nothing carries from round to round.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "aggregator/strategy.h"

namespace fedmesh {

enum class RobustRule { kMedian, kTrimmedMean, kKrum, kMultiKrum };

class RobustAggregator final : public Strategy {
 public:
  // InvalidArgument naming the option: trim_fraction or byzantine_fraction outside [0, 0.5).
  static Result<std::unique_ptr<RobustAggregator>> Create(RobustRule rule,
                                                          const StrategyOptions& options);

  // CheckRoundUpdates' errors, with `new_global` untouched.
  Status Aggregate(std::span<const float> global, const std::vector<ClientUpdate>& updates,
                   std::span<float> new_global) override;
  std::string_view name() const override;

  // The f Krum assumes among n updates: floor(byzantine_fraction * n), lowered until
  // n >= 2f + 3 (or to 0).
  uint32_t AssumedByzantine(size_t n) const;
  // Krum scores of `updates` (lower is more central) with `f` assumed Byzantine: the sum of
  // squared distances to the max(1, n - f - 2) nearest other updates (capped at n - 1);
  // 0 for a single update. REQUIRES: equal sizes.
  static std::vector<double> KrumScores(const std::vector<ClientUpdate>& updates, uint32_t f);
  // Indices of the updates the last Aggregate of krum / multikrum averaged, ascending.
  const std::vector<size_t>& last_selected() const { return last_selected_; }

 private:
  RobustAggregator(RobustRule rule, const StrategyOptions& options)
      : rule_(rule), trim_(options.trim_fraction), byzantine_(options.byzantine_fraction),
        select_(options.multikrum_select) {}

  RobustRule rule_;
  double trim_, byzantine_;
  uint32_t select_;
  std::vector<size_t> last_selected_;
};

}  // namespace fedmesh
