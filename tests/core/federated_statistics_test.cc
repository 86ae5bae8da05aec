// Federated statistics (issue 19): the t-digest's quantiles against exact ones, a site's
// privacy policy (min_count, noisy min/max, histogram bins), the merged figures against
// the pooled rows computed independently (two-pass, long double) to 1e-9 relative, and the
// wire round trip with its refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/data/impute.h"
#include "core/rng.h"
#include "core/stats/federated_statistics.h"
#include "core/stats/secure_sums.h"
#include "core/stats/site_statistics.h"
#include "core/stats/tdigest.h"
#include "core/wire/wire_codec.h"

namespace fedmesh {
namespace {

double ExactQuantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::min<double>(q * v.size(), v.size() - 1))];
}

// Rank error: how far q lies outside the ranks the digest's answer takes among the sorted
// values (an interval where values repeat, as in a 0/1 column), as a fraction.
double RankError(const std::vector<double>& sorted, double value, double q) {
  const double n = static_cast<double>(sorted.size());
  const double lo = (std::lower_bound(sorted.begin(), sorted.end(), value) - sorted.begin()) / n;
  const double hi = (std::upper_bound(sorted.begin(), sorted.end(), value) - sorted.begin()) / n;
  return q < lo ? lo - q : q > hi ? q - hi : 0.0;
}

TEST(TDigest, QuantilesOfASkewedSampleAreWithinHalfAPercentOfRank) {
  Rng rng(3);
  std::vector<double> v;
  TDigest d;
  for (int i = 0; i < 100000; ++i) {
    v.push_back(rng.LogNormal(0.0, 1.0));
    d.Add(v.back());
  }
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (double q : {0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999}) {
    EXPECT_LT(RankError(sorted, d.Quantile(q), q), 0.005) << "q " << q;
  }
  EXPECT_EQ(d.Quantile(0.0), sorted.front());
  EXPECT_EQ(d.Quantile(1.0), sorted.back());
  EXPECT_LE(d.centroids().size(), 200u);
}

TEST(TDigest, MergedDigestsAnswerLikeOneOverTheUnion) {
  Rng rng(5);
  std::vector<double> all;
  std::vector<TDigest> parts(4);
  for (int p = 0; p < 4; ++p) {
    for (int i = 0; i < 5000 * (p + 1); ++i) {
      const double x = rng.Normal(10.0 * p, 1.0 + p);  // sites with different ranges
      all.push_back(x);
      parts[p].Add(x);
    }
  }
  TDigest merged;
  for (TDigest& p : parts) {
    p.Compress();
    std::vector<double> m, w;
    for (const auto& c : p.centroids()) { m.push_back(c.mean); w.push_back(c.weight); }
    auto back = TDigest::FromCentroids(m, w, p.min(), p.max());
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    merged.Merge(*back);
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(merged.total_weight(), static_cast<double>(all.size()));
  for (double q : {0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99}) {
    EXPECT_LT(RankError(all, merged.Quantile(q), q), 0.01) << "q " << q << " exact "
                                                            << ExactQuantile(all, q);
  }
}

TEST(TDigest, FromCentroidsRefusesBadCentroids) {
  const std::vector<double> m = {1, 2}, w = {1, 1};
  EXPECT_FALSE(TDigest::FromCentroids(std::vector<double>{2, 1}, w, 0, 3).ok());
  EXPECT_FALSE(TDigest::FromCentroids(m, std::vector<double>{1, 0}, 0, 3).ok());
  EXPECT_FALSE(TDigest::FromCentroids(m, std::vector<double>{1}, 0, 3).ok());
  EXPECT_FALSE(TDigest::FromCentroids(std::vector<double>{1, NAN}, w, 0, 3).ok());
  EXPECT_FALSE(TDigest::FromCentroids(m, w, 1.5, 3).ok()) << "min inside the centroids";
  EXPECT_TRUE(TDigest::FromCentroids(m, w, 1, 2).ok());
}

// Rows with a large offset and a small spread (mean / std ~ 1e3), where a careless variance
// (sum of squares in float, or a plain running sum) loses the 1e-9.
Dataset SiteRows(Rng& rng, size_t n, double shift, int classes) {
  Dataset d;
  d.sample_shape = {3};
  d.num_classes = classes;
  d.feature_names = {"age", "creatinine", "flag"};
  for (size_t i = 0; i < n; ++i) {
    d.features.push_back(static_cast<float>(rng.Normal(55.0 + shift, 12.0)));
    d.features.push_back(static_cast<float>(1000.0 + rng.Normal(shift, 1.0)));
    d.features.push_back(rng.Uniform() < 0.3 ? 1.0f : 0.0f);
    d.labels.push_back(static_cast<int32_t>(rng.UniformInt(static_cast<uint64_t>(classes))));
  }
  return d;
}

StatsPrivacyPolicy Exact() {
  StatsPrivacyPolicy p;
  p.minmax_noise = 0.0;
  return p;
}

TEST(FederatedStatistics, MergedFiguresEqualThePooledRowsToOneInABillion) {
  Rng rng(17);
  std::vector<Dataset> sites = {SiteRows(rng, 700, 0.0, 3), SiteRows(rng, 45, 5.0, 3),
                                SiteRows(rng, 3000, -3.0, 3)};
  Rng noise(1);
  std::map<std::string, wire::SiteStatistics> phase1, phase2;
  wire::StatsRequest req;
  for (size_t s = 0; s < sites.size(); ++s) {
    auto st = SummarizeSite(sites[s], req, Exact(), noise);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    phase1["site-" + std::to_string(s)] = *st;
  }
  auto merged = MergeSiteStatistics(phase1, std::vector<double>{0.5});
  ASSERT_TRUE(merged.ok()) << merged.status().ToString();
  const wire::StatsRequest hist = HistogramRequest(*merged, 20);
  for (size_t s = 0; s < sites.size(); ++s) {
    auto st = SummarizeSite(sites[s], hist, Exact(), noise);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    phase2["site-" + std::to_string(s)] = *st;
  }
  ASSERT_TRUE(AddHistograms(*merged, hist, phase2).ok());

  // The pooled reference: every row, two passes in long double.
  EXPECT_EQ(merged->rows, 3745u);
  for (size_t j = 0; j < 3; ++j) {
    std::vector<double> x;
    for (const Dataset& d : sites)
      for (size_t i = 0; i < d.size(); ++i) x.push_back(d.sample(i)[j]);
    long double mean = 0, var = 0;
    for (double v : x) mean += v;
    mean /= x.size();
    for (double v : x) var += (v - mean) * (v - mean);
    var /= x.size();
    const FeatureStatistics& f = merged->features[j];
    EXPECT_EQ(f.count, x.size());
    EXPECT_NEAR(f.mean, static_cast<double>(mean), 1e-9 * std::fabs(static_cast<double>(mean))) << f.name;
    EXPECT_NEAR(f.variance, static_cast<double>(var), 1e-9 * static_cast<double>(var)) << f.name;
    EXPECT_EQ(f.min, *std::min_element(x.begin(), x.end())) << "noise 0: the exact minimum";
    EXPECT_EQ(f.max, *std::max_element(x.begin(), x.end()));
    std::vector<uint64_t> counts(20, 0);
    for (double v : x) ++counts[HistogramBin(v, hist.bin_lo[j], hist.bin_hi[j], 20)];
    EXPECT_EQ(f.histogram, counts) << f.name;
    EXPECT_EQ(f.histogram_rows, x.size());
    ASSERT_EQ(f.quantiles.size(), 1u);
    std::sort(x.begin(), x.end());
    EXPECT_LT(RankError(x, f.quantiles[0], 0.5), 0.01) << f.name;
  }
  std::vector<uint64_t> labels(3, 0);
  for (const Dataset& d : sites)
    for (int32_t y : d.labels) ++labels[static_cast<size_t>(y)];
  EXPECT_EQ(merged->label_counts, labels);
}

TEST(FederatedStatistics, ASiteBelowMinCountReleasesNothing) {
  Rng rng(2), noise(3);
  const Dataset small = SiteRows(rng, 9, 0.0, 2);
  auto st = SummarizeSite(small, wire::StatsRequest{}, StatsPrivacyPolicy{}, noise);
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->released);
  EXPECT_NE(st->withheld.find("9 rows, fewer than its min_count 10"), std::string::npos) << st->withheld;
  EXPECT_TRUE(st->features.empty());
  EXPECT_TRUE(st->label_counts.empty());
  EXPECT_EQ(st->rows, 0u);

  StatsPrivacyPolicy off;
  off.allow = false;
  auto refused = SummarizeSite(SiteRows(rng, 500, 0.0, 2), wire::StatsRequest{}, off, noise);
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->released);

  // Merging: the withheld site is left out of every figure.
  std::map<std::string, wire::SiteStatistics> answers = {{"big", *SummarizeSite(SiteRows(rng, 100, 0, 2), {}, Exact(), noise)},
                                                         {"small", *st}};
  auto merged = MergeSiteStatistics(answers, std::vector<double>{});
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->rows, 100u);
  EXPECT_EQ(merged->sites, std::vector<std::string>{"big"});
}

TEST(FederatedStatistics, NoisePushesMinAndMaxOutwardAndFineHistogramsAreWithheld) {
  Rng rng(4), noise(5);
  const Dataset d = SiteRows(rng, 40, 0.0, 2);
  StatsPrivacyPolicy p;  // minmax_noise 0.05, max_bins_fraction 0.5
  auto st = SummarizeSite(d, wire::StatsRequest{}, p, noise);
  ASSERT_TRUE(st.ok());
  for (size_t j = 0; j < 3; ++j) {
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < d.size(); ++i) {
      lo = std::min(lo, d.sample(i)[j]);
      hi = std::max(hi, d.sample(i)[j]);
    }
    EXPECT_LT(st->features[j].min, lo) << "the exact minimum is never released";
    EXPECT_GT(st->features[j].max, hi);
    EXPECT_GT(st->features[j].min, lo - 0.5 * (hi - lo)) << "noise of 5% of the range";
  }
  wire::StatsRequest fine;
  fine.phase = 2;
  fine.bins = 21;  // > 0.5 x 40 rows
  fine.bin_lo.assign(3, 0.0);
  fine.bin_hi.assign(3, 2000.0);
  auto h = SummarizeSite(d, fine, p, noise);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->released);
  EXPECT_TRUE(h->features[0].histogram.empty());
  EXPECT_NE(h->withheld.find("histograms withheld"), std::string::npos) << h->withheld;
  fine.bins = 20;
  auto ok = SummarizeSite(d, fine, p, noise);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->features[0].histogram.size(), 20u);

  fine.bin_lo.resize(2);
  fine.bin_hi.resize(2);
  EXPECT_FALSE(SummarizeSite(d, fine, p, noise).ok()) << "ranges for 2 of 3 features";
}

TEST(FederatedStatistics, SitesWithOtherFeaturesAreNamed) {
  Rng rng(6), noise(7);
  Dataset other = SiteRows(rng, 50, 0, 2);
  other.feature_names[1] = "urea";
  std::map<std::string, wire::SiteStatistics> answers = {
      {"a", *SummarizeSite(SiteRows(rng, 50, 0, 2), {}, Exact(), noise)},
      {"b", *SummarizeSite(other, {}, Exact(), noise)}};
  auto merged = MergeSiteStatistics(answers, std::vector<double>{});
  ASSERT_FALSE(merged.ok());
  EXPECT_NE(merged.status().message().find("site b summarises other features"), std::string::npos)
      << merged.status().ToString();
}

// Secure sums: the word-wise sum (mod 2^32, as SecAgg+ adds) of the sites' encodings
// decodes to the sum of their values, negative and fractional ones included, to 2^-44.
TEST(SecureSums, WordWiseSumsDecodeToTheSumOfTheValues) {
  const SecureSumLayout layout{2, 3, 2};
  EXPECT_EQ(layout.words(), (2 * (4 + 3) + 2 + 1) * kSecureLimbs);
  Rng rng(12);
  std::vector<uint32_t> total(layout.words(), 0);
  SecureSums expect = ZeroSums(layout);
  std::vector<long double> exact_sum(2, 0), exact_sq(2, 0);
  for (int site = 0; site < 5; ++site) {
    SecureSums s = ZeroSums(layout);
    for (size_t j = 0; j < 2; ++j) {
      s.count[j] = 100 + site;
      s.sum[j] = rng.Normal(-1e6, 1e5) + 0.123456789;  // negative, fractional
      s.sum_sq[j] = 1e15 * rng.Uniform();
      s.histogram_rows[j] = s.count[j];
      for (uint32_t b = 0; b < 3; ++b) s.histogram[j][b] = static_cast<double>(site + b);
      exact_sum[j] += s.sum[j];
      exact_sq[j] += s.sum_sq[j];
      expect.count[j] += s.count[j];
    }
    s.label_counts = {60.0 + site, 40.0};
    s.rows = 100 + site;
    auto words = EncodeSecureSums(s, layout);
    ASSERT_TRUE(words.ok()) << words.status().ToString();
    for (size_t w = 0; w < total.size(); ++w) total[w] += (*words)[w];  // wraps mod 2^32
  }
  auto back = DecodeSecureSums(total, layout);
  ASSERT_TRUE(back.ok());
  for (size_t j = 0; j < 2; ++j) {
    EXPECT_EQ(back->count[j], expect.count[j]);
    EXPECT_NEAR(back->sum[j], static_cast<double>(exact_sum[j]), 5 * std::ldexp(1.0, -44) + 1e-16 * std::fabs(back->sum[j]));
    EXPECT_NEAR(back->sum_sq[j], static_cast<double>(exact_sq[j]), 1e-16 * static_cast<double>(exact_sq[j]));
    EXPECT_EQ(back->histogram[j], (std::vector<double>{10, 15, 20}));
  }
  EXPECT_EQ(back->label_counts, (std::vector<double>{310, 200}));
  EXPECT_EQ(back->rows, 510);

  SecureSums big = ZeroSums(layout);
  big.sum_sq[1] = 1e26;
  EXPECT_FALSE(EncodeSecureSums(big, layout).ok()) << "beyond 2^83";
  big.sum_sq[1] = NAN;
  EXPECT_FALSE(EncodeSecureSums(big, layout).ok());
  SecureSums wrong = ZeroSums(SecureSumLayout{2, 4, 2});
  EXPECT_FALSE(EncodeSecureSums(wrong, layout).ok());
  EXPECT_FALSE(DecodeSecureSums(std::vector<uint32_t>(7, 0), layout).ok());
}

// A site's secure answer: its exact sums for a released site, zeros below min_count.
TEST(SecureSums, SiteSecureSumsFollowThePolicy) {
  Rng rng(13);
  const Dataset d = SiteRows(rng, 50, 0, 2);
  wire::StatsRequest req{2, 4, {0, 900, 0}, {100, 1100, 1}, true, 2};
  auto s = SiteSecureSums(d, req, Exact());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->rows, 50);
  EXPECT_EQ(s->count[1], 50);
  double sum = 0;
  for (size_t i = 0; i < d.size(); ++i) sum += d.sample(i)[1];
  EXPECT_NEAR(s->sum[1], sum, 1e-9 * sum);
  EXPECT_EQ(s->histogram_rows[0], 50);
  const Dataset small = SiteRows(rng, 5, 0, 2);
  auto z = SiteSecureSums(small, req, Exact());
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->rows, 0);
  EXPECT_EQ(z->sum[1], 0);
  req.secure = false;
  EXPECT_FALSE(SiteSecureSums(d, req, Exact()).ok());
}

// Missing cells ([data] missing = "impute_mean"): statistics count and sum only the
// present values, and imputing with their means leaves each feature's mean unchanged.
TEST(FederatedStatistics, MissingCellsAreLeftOutAndImputedWithTheMean) {
  Rng rng(21), noise(22);
  Dataset d = SiteRows(rng, 60, 0, 2);
  double sum = 0;
  size_t present = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i % 7 == 0) {
      d.features[i * 3 + 1] = NAN;
    } else {
      sum += d.features[i * 3 + 1];
      ++present;
    }
  }
  EXPECT_TRUE(HasMissing(d));
  auto st = SummarizeSite(d, wire::StatsRequest{}, Exact(), noise);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->features[1].count, present);
  EXPECT_EQ(st->features[0].count, 60u);
  EXPECT_NEAR(st->features[1].sum, sum, 1e-9 * sum);
  auto merged = MergeSiteStatistics({{"a", *st}}, std::vector<double>{});
  ASSERT_TRUE(merged.ok());
  const std::vector<double> means = ColumnMeans(d).value();
  EXPECT_NEAR(means[1], merged->features[1].mean, 1e-9 * means[1]);
  std::vector<double> fed;
  for (const auto& f : merged->features) fed.push_back(f.mean);
  auto n = ImputeMissing(d, fed);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 60 - present);
  EXPECT_FALSE(HasMissing(d));
  EXPECT_NEAR(ColumnMeans(d).value()[1], means[1], 1e-4);
  EXPECT_FALSE(ImputeMissing(d, std::vector<double>{1.0}).ok()) << "one value for 3 features";
  // A feature missing in every row has no mean: an error naming it, not a silent 0.
  for (size_t i = 0; i < d.size(); ++i) d.features[i * 3 + 2] = NAN;
  auto none = ColumnMeans(d);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("feature '" + d.feature_names.at(2) + "' is missing in all 60 rows"),
            std::string::npos)
      << none.status().ToString();
  d.feature_names.clear();
  EXPECT_NE(ColumnMeans(d).status().message().find("feature column 2 is missing"), std::string::npos)
      << ColumnMeans(d).status().ToString();
}

// ---- wire ---------------------------------------------------------------------------------

wire::Message StatsResultMessage(const wire::SiteStatistics& s) {
  wire::FitResult r;
  r.round = 1;
  r.num_examples = s.rows;
  r.update = wire::FloatPayload({});
  r.statistics = s;
  wire::Message m;
  m.header.federation_id = "fed";
  m.header.sender_id = "site-1";
  m.header.round = 1;
  m.body = r;
  return m;
}

TEST(FederatedStatistics, WireRoundTripAndRefusals) {
  Rng rng(8), noise(9);
  auto st = SummarizeSite(SiteRows(rng, 200, 0, 2), {}, StatsPrivacyPolicy{}, noise);
  ASSERT_TRUE(st.ok());
  const wire::Message m = StatsResultMessage(*st);
  auto frames = wire::Encode(m);
  ASSERT_TRUE(frames.ok()) << frames.status().ToString();
  auto back = wire::Decode(*frames);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(std::get<wire::FitResult>(back->body).statistics, *st);

  wire::FitTask task;
  task.round = 1;
  task.global_model = wire::FloatPayload({});
  task.statistics = wire::StatsRequest{2, 10, {0.0, 1.0, 2.0}, {1.0, 2.0, 3.0}};
  wire::Message tm;
  tm.header.federation_id = "fed";
  tm.header.sender_id = "aggregator";
  tm.header.round = 1;
  tm.body = task;
  auto tframes = wire::Encode(tm);
  ASSERT_TRUE(tframes.ok()) << tframes.status().ToString();
  auto tback = wire::Decode(*tframes);
  ASSERT_TRUE(tback.ok());
  EXPECT_EQ(std::get<wire::FitTask>(tback->body).statistics, task.statistics);

  auto refused = [&](const std::function<void(wire::SiteStatistics&)>& edit, const std::string& fragment) {
    wire::SiteStatistics bad = *st;
    edit(bad);
    auto f = wire::Encode(StatsResultMessage(bad));
    ASSERT_FALSE(f.ok()) << fragment;
    EXPECT_NE(f.status().message().find(fragment), std::string::npos) << f.status().ToString();
  };
  refused([](auto& s) { s.features[1].sum = NAN; }, "non-finite");
  refused([](auto& s) { s.features[0].histogram = {1, 2}; }, "histogram sums to 3");
  refused([](auto& s) { s.label_counts[0] += 1; }, "label counts sum to");
  refused([](auto& s) { s.feature_names.pop_back(); }, "summaries for 2 feature names");
  refused([](auto& s) { s.features[2].centroid_weight.pop_back(); }, "different lengths");
  refused([](auto& s) { s.released = false; }, "not released but carries");
  refused([](auto& s) { s.phase = 3; }, "phase is 3");
  wire::Message bad_task = tm;
  std::get<wire::FitTask>(bad_task.body).statistics->bin_hi[0] = -1.0;
  EXPECT_FALSE(wire::Encode(bad_task).ok());
  std::get<wire::FitTask>(bad_task.body).statistics = wire::StatsRequest{2, 5000, {}, {}};
  EXPECT_FALSE(wire::Encode(bad_task).ok());
  std::get<wire::FitTask>(bad_task.body).statistics = wire::StatsRequest{};
  std::get<wire::FitTask>(bad_task.body).evaluate_only = true;
  EXPECT_FALSE(wire::Encode(bad_task).ok());
}

}  // namespace
}  // namespace fedmesh
