// The federated statistics parts of FitTask and FitResult (StatsRequest, SiteStatistics):
// their field checks and their protobuf conversion, used by wire_codec.cc. Kept apart so
// that the message codec does not grow with every optional payload.
// Thread-safety: pure functions.
#pragma once

#include "core/status.h"
#include "core/wire/fedmesh.pb.h"
#include "core/wire/messages.h"

namespace fedmesh::wire {

// InvalidArgument / OutOfRange naming the field: a phase other than 1 or 2, bins out of
// 1..kMaxStatsBins in phase 2 (or set in phase 1), ranges not one per feature, non-finite
// or reversed ranges.
Status CheckStatsRequest(const StatsRequest& r);
// The same for an answer: sizes within the kMaxStats* bounds, one summary per feature
// name, finite values, counts that fit the rows, centroids with matching lengths and
// positive weights, histograms summing to the feature's count, nothing released but the
// reason when `released` is false.
Status CheckSiteStatistics(const SiteStatistics& s);

// Words a secure phase-2 request's answer has (core/stats/secure_sums.h), and their bound:
// 8 M words, 32 MiB per masked input.
size_t SecureStatsWords(const StatsRequest& r);
inline constexpr size_t kMaxSecureStatsWords = size_t{1} << 23;

void ToProto(const StatsRequest& in, pb::StatsRequest* out);
void ToProto(const SiteStatistics& in, pb::SiteStatistics* out);
// Bounded before copying: a message that claims a million features is refused without
// allocating for them.
Status FromProto(const pb::StatsRequest& in, StatsRequest* out);
Status FromProto(const pb::SiteStatistics& in, SiteStatistics* out);

}  // namespace fedmesh::wire
