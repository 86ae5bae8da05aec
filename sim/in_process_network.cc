#include "sim/in_process_network.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/check.h"

namespace fedmesh {

InProcessNetwork::InProcessNetwork(VirtualClockEnv& env, LinkModel link, uint64_t seed,
                                   wire::WireLimits limits)
    : env_(env), link_(link), rng_(seed), limits_(limits) {
  FM_CHECK(std::isfinite(link_.latency_s) && link_.latency_s >= 0);
  FM_CHECK(std::isfinite(link_.bandwidth_bytes_per_s) && link_.bandwidth_bytes_per_s >= 0);
  FM_CHECK(link_.loss >= 0 && link_.loss <= 1);
}

Result<WireTrip> InProcessNetwork::Transmit(const wire::Message& message,
                                            const wire::WireLimits& limits,
                                            wire::DigestMemo* memo,
                                            std::vector<wire::Frame>* frames_out) {
  FM_ASSIGN_OR_RETURN(auto frames, wire::Encode(message, limits, memo));
  auto trip = Receive(frames, limits, memo);
  FM_CHECK(trip.ok());  // Encode produced the frames with the same limits
  if (frames_out != nullptr) *frames_out = std::move(frames);
  return trip;
}

Result<WireTrip> InProcessNetwork::Receive(std::span<const wire::Frame> frames,
                                           const wire::WireLimits& limits,
                                           wire::DigestMemo* memo) {
  WireTrip trip;
  for (const auto& f : frames) trip.bytes += f.size();
  FM_ASSIGN_OR_RETURN(trip.received, wire::Decode(frames, limits, memo));
  return trip;
}

Status InProcessNetwork::Send(const std::string& from, const std::string& to,
                              const wire::Message& message) {
  if (IsDown(from)) return Status::Unavailable(from + " is down and cannot send");
  FM_ASSIGN_OR_RETURN(WireTrip trip, Transmit(message, limits_));
  return Send(from, to, std::move(trip));
}

Status InProcessNetwork::Send(const std::string& from, const std::string& to, WireTrip trip) {
  if (IsDown(from)) return Status::Unavailable(from + " is down and cannot send");
  const uint64_t bytes = trip.bytes;
  sent_[from] += bytes;
  total_bytes_ += bytes;
  if (IsDown(to) || (link_.loss > 0 && rng_.Uniform() < link_.loss)) {
    ++dropped_;
    return Status::OK();
  }
  double latency = link_.latency_s;
  double bandwidth = link_.bandwidth_bytes_per_s;
  auto narrow = [&bandwidth](double b) {
    if (b > 0 && (bandwidth == 0 || b < bandwidth)) bandwidth = b;
  };
  if (node_links_) {
    const NodeLink a = node_links_(from), b = node_links_(to);
    latency += a.latency_s + b.latency_s;
    narrow(a.up_bytes_per_s);
    narrow(b.down_bytes_per_s);
  }
  double arrival = env_.NowSeconds() + latency;
  if (bandwidth > 0) arrival += static_cast<double>(bytes) / bandwidth;
  double& last = link_last_arrival_[{from, to}];
  arrival = std::max(arrival, last);
  last = arrival;
  auto shared = std::make_shared<WireTrip>(std::move(trip));
  ScheduleAt(arrival, [this, from, to, shared] { Deliver(from, to, *shared); });
  return Status::OK();
}

void InProcessNetwork::Deliver(const std::string& from, const std::string& to, WireTrip& trip) {
  if (IsDown(to)) {
    ++dropped_;
    return;
  }
  received_[to] += trip.bytes;
  if (handler_) handler_(from, to, std::move(trip.received));
}

void InProcessNetwork::ScheduleAt(double t, std::function<void()> fn) {
  FM_CHECK(std::isfinite(t));
  events_.push(Event{std::max(t, env_.NowSeconds()), next_order_++, std::move(fn)});
}

uint64_t InProcessNetwork::RunUntil(double t) {
  uint64_t n = 0;
  while (!events_.empty() && events_.top().time <= t) {
    Event e = events_.top();
    events_.pop();
    env_.AdvanceTo(e.time);
    e.fn();
    ++n;
  }
  if (t > env_.NowSeconds()) env_.AdvanceTo(t);
  return n;
}

uint64_t InProcessNetwork::RunAll(uint64_t max_events) {
  uint64_t n = 0;
  while (!events_.empty() && n < max_events) {
    Event e = events_.top();
    events_.pop();
    env_.AdvanceTo(e.time);
    e.fn();
    ++n;
  }
  return n;
}

void InProcessNetwork::SetDown(const std::string& node, bool down) {
  if (down) {
    down_.insert(node);
  } else {
    down_.erase(node);
  }
}

uint64_t InProcessNetwork::bytes_sent(const std::string& node) const {
  auto it = sent_.find(node);
  return it == sent_.end() ? 0 : it->second;
}

uint64_t InProcessNetwork::bytes_received(const std::string& node) const {
  auto it = received_.find(node);
  return it == received_.end() ? 0 : it->second;
}

}  // namespace fedmesh
