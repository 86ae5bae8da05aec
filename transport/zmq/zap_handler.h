// ZapHandler: the ZeroMQ authentication handler (ZAP, ZeroMQ RFC 27) that decides which
// CurveZMQ clients may connect to the aggregator. It owns a REP socket bound to
// inproc://zeromq.zap.01 in the server's zmq::context_t and a thread answering libzmq's
// requests: 200 for a CURVE client whose 32-byte public key is in the current allowlist,
// 400 for any other key or mechanism. On success the reply's User-Id is the key in Z85, so
// the server reads the authenticated peer id from each message's "User-Id" property. A
// refused key is logged (warn, with the Z85 key and address, at most once per key every
// 10 s, so a refused client retrying does not flood the log) and counted; the connection
// is closed by libzmq and none of its bytes reach the server socket.
//
// Thread-safety: Reload, refused_count and admitted_count may be called from any thread
// (the aggregator calls Reload from its SIGHUP path); the allowlist is swapped atomically,
// so every request sees either the whole old list or the whole new one. The destructor
// stops and joins the thread; it must run before the context is closed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "core/status.h"
#include "crypto/identity.h"

namespace fedmesh {

class ZapHandler {
 public:
  // The endpoint libzmq sends ZAP requests to (fixed by RFC 27).
  static constexpr const char* kEndpoint = "inproc://zeromq.zap.01";

  // Binds the handler in `context` and starts its thread, admitting `allowlist`.
  // AlreadyExists when another handler is bound in this context; Internal for other
  // libzmq failures. REQUIRES: `context` outlives the handler.
  static Result<std::unique_ptr<ZapHandler>> Start(zmq::context_t& context,
                                                   const std::vector<PublicIdentity>& allowlist);

  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  // Replaces the allowlist. Connections already admitted stay up; new handshakes use
  // the new list.
  void Reload(const std::vector<PublicIdentity>& allowlist);

  // Handshakes refused / admitted since Start (a client that keeps retrying counts once
  // per attempt).
  uint64_t refused_count() const { return refused_.load(std::memory_order_relaxed); }
  uint64_t admitted_count() const { return admitted_.load(std::memory_order_relaxed); }

 private:
  using KeySet = std::set<CurveKey>;
  explicit ZapHandler(zmq::socket_t socket);
  void Run();
  std::shared_ptr<const KeySet> allowlist() const;

  zmq::socket_t socket_;  // used only by thread_ once started
  mutable std::mutex mu_;
  std::shared_ptr<const KeySet> allowlist_;  // GUARDED_BY(mu_)
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> admitted_{0};
  std::thread thread_;
};

}  // namespace fedmesh
