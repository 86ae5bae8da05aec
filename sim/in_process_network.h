// InProcessNetwork: the in-process transport the simulator and many-node tests drive the
// sans-IO protocol cores over. Nodes are names; Send encodes the message with the real wire
// codec (so every message is validated, and its true encoded size is what is counted and
// what the link model charges for) and schedules its delivery in virtual time:
//   arrival = max(now + latency + bytes / bandwidth, previous arrival on the same link)
// which keeps each (from, to) link FIFO, like a TCP connection. Timers and deliveries sit in
// one event queue ordered by (time, insertion order), so a run is a pure function of its
// seed. A node marked down neither sends nor receives: messages to it are dropped and
// counted (a crashed process); messages already in flight to it are dropped on arrival.
// Thread-safety: one thread (the event loop) owns the network and the VirtualClockEnv.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/wire/messages.h"
#include "core/wire/wire_codec.h"
#include "sim/virtual_clock_env.h"

namespace fedmesh {

struct LinkModel {
  // One-way latency of every link. Default: 1 ms.
  double latency_s = 0.001;
  // Bytes per second of every link; 0 = unlimited (latency only). Default: 0.
  double bandwidth_bytes_per_s = 0.0;
  // Probability that a message is lost (dropped and counted). Default: 0.
  double loss = 0.0;
};

// One node's own access link, on top of the LinkModel: extra one-way latency and its
// upload / download rates (0 = not limited by this node). A message from A to B takes
//   link.latency_s + A.latency_s + B.latency_s + bytes / min(link bandwidth, A.up, B.down)
// (zeros left out of the min), the usual last-mile model of federated simulators.
struct NodeLink {
  double latency_s = 0.0;
  double up_bytes_per_s = 0.0;
  double down_bytes_per_s = 0.0;
};

// A message through the real wire codec: encoded to frames, then decoded back from them as
// its receiver would get it, with its true encoded size.
struct WireTrip {
  wire::Message received;
  uint64_t bytes = 0;
};

class InProcessNetwork {
 public:
  // Encodes `message` and decodes the frames (every check of both sides runs). A pure
  // function of its arguments, safe on any thread: a simulator makes the trips of many
  // messages at once on its workers and Sends them in its own order (sim/aggregator_mode.cc).
  // With `memo` (that thread's own), both sides hash the payload through it: the receiver's
  // check of the bytes the sender just hashed, and a round's FitTasks, which all carry the
  // same model, cost one SHA-256 pass instead of two per message.
  // With `frames`, also the encoded frames (a sharded simulation hands them to the other
  // ranks, which Receive them).
  static Result<WireTrip> Transmit(const wire::Message& message, const wire::WireLimits& limits,
                                   wire::DigestMemo* memo = nullptr,
                                   std::vector<wire::Frame>* frames = nullptr);
  // The trip of frames Transmit made elsewhere: decoded as its receiver would, with their
  // size. The decoder's error for frames that do not decode.
  static Result<WireTrip> Receive(std::span<const wire::Frame> frames,
                                  const wire::WireLimits& limits, wire::DigestMemo* memo = nullptr);

  // `from`, `to`, and the decoded message, at its arrival time (env.NowSeconds()).
  using Handler = std::function<void(const std::string& from, const std::string& to,
                                     wire::Message message)>;

  // REQUIRES: env outlives the network.
  InProcessNetwork(VirtualClockEnv& env, LinkModel link, uint64_t seed,
                   wire::WireLimits limits = {});

  void SetHandler(Handler handler) { handler_ = std::move(handler); }
  // Gives each node its own access link, asked for at every Send (a function rather than a
  // table, so a million simulated clients cost nothing until they talk). Default: none.
  // REQUIRES: the function returns finite, non-negative values.
  void SetNodeLinks(std::function<NodeLink(const std::string& node)> links) {
    node_links_ = std::move(links);
  }

  // Encodes `message` and schedules its arrival at `to`. The encoding error, if any (the
  // message would be refused by a real receiver); Unavailable when `from` is down. A message
  // to a down node or lost by the link model is counted as dropped and returns OK, as a
  // datagram into a dead socket would.
  Status Send(const std::string& from, const std::string& to, const wire::Message& message);
  // Send of a message already through Transmit with limits().
  Status Send(const std::string& from, const std::string& to, WireTrip trip);
  const wire::WireLimits& limits() const { return limits_; }

  // Runs `fn` at virtual time `t` (not before now).
  void ScheduleAt(double t, std::function<void()> fn);

  // Processes events in time order until the next one is after `t`, then advances the
  // clock to `t`. Returns the number of events processed.
  uint64_t RunUntil(double t);
  // Processes events until none is left or `max_events` were processed.
  uint64_t RunAll(uint64_t max_events = UINT64_MAX);

  // Marks `node` crashed (true) or running again (false).
  void SetDown(const std::string& node, bool down);
  bool IsDown(const std::string& node) const { return down_.contains(node); }

  // Encoded bytes `node` sent / received (delivered), and messages dropped (to a down node,
  // lost, or arriving at a node that went down meanwhile).
  uint64_t bytes_sent(const std::string& node) const;
  uint64_t bytes_received(const std::string& node) const;
  uint64_t messages_dropped() const { return dropped_; }
  uint64_t total_bytes_sent() const { return total_bytes_; }

 private:
  struct Event {
    double time;
    uint64_t order;
    std::function<void()> fn;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time != b.time ? a.time > b.time : a.order > b.order;
    }
  };
  void Deliver(const std::string& from, const std::string& to, WireTrip& trip);

  VirtualClockEnv& env_;
  LinkModel link_;
  Rng rng_;
  wire::WireLimits limits_;
  Handler handler_;
  std::function<NodeLink(const std::string&)> node_links_;
  std::priority_queue<Event, std::vector<Event>, Later> events_;
  uint64_t next_order_ = 0;
  std::set<std::string> down_;
  std::map<std::pair<std::string, std::string>, double> link_last_arrival_;
  std::map<std::string, uint64_t> sent_, received_;
  uint64_t dropped_ = 0;
  uint64_t total_bytes_ = 0;
};

}  // namespace fedmesh
