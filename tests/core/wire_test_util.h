// Helpers of the wire codec tests (wire_test.cc, wire_hostile_test.cc): a header, typical
// FitTask / FitResult messages, and editing real frames through the generated protobuf
// types (which these tests, as the conversion code's own tests, may include).
#pragma once

#include <gtest/gtest.h>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>
#include "core/rng.h"
#include "core/wire/fedmesh.pb.h"
#include "core/wire/wire_codec.h"
#include "tests/core/status_assertions.h"

namespace fedmesh::wire {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;

using fedmesh::testing::HasCode;

inline Header TestHeader(uint64_t message_id = 42) {
  Header h;
  h.federation_id = "fed-hospitals";
  h.sender_id = "node-7";
  h.round = 5;
  h.model_version = 12;
  h.message_id = message_id;
  return h;
}

inline std::vector<float> Values(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.Normal());
  return v;
}

inline Message FitTaskMessage(std::span<const float> model,
                       std::vector<std::vector<uint64_t>> shapes = {}) {
  FitTask t;
  t.round = 5;
  t.global_model = FloatPayload(model, std::move(shapes));
  t.local_epochs = 3;
  t.batch_size = 64;
  t.learning_rate = 0.05;
  t.momentum = 0.9;
  t.prox_mu = 0.01;
  t.deadline_unix_ms = 1700000000123;
  t.update_codec = "topk:0.01|fp16|zstd";
  return Message{TestHeader(), t};
}

inline Message FitResultMessage(std::span<const float> update, uint64_t message_id = 42,
                         std::string sender = "node-7") {
  FitResult r;
  r.round = 5;
  r.num_examples = 6000;
  r.train_loss = 0.4375;
  r.update = FloatPayload(update);
  r.bytes_before_codec = r.update.bytes.size();
  r.bytes_after_codec = r.update.bytes.size();
  Message m{TestHeader(message_id), r};
  m.header.sender_id = std::move(sender);
  return m;
}

// What Decode returns for `m`: the same message with the payload hash filled in.
inline Message WithHash(Message m) {
  if (auto* t = std::get_if<FitTask>(&m.body)) {
    t->global_model.digest = HashPayload(DigestKind::kBlake3, t->global_model.bytes);
  }
  if (auto* r = std::get_if<FitResult>(&m.body)) r->update.digest = HashPayload(DigestKind::kBlake3, r->update.bytes);
  return m;
}

inline std::vector<Frame> MustEncode(const Message& m, const WireLimits& l = {}) {
  auto frames = Encode(m, l);
  EXPECT_TRUE(frames.ok()) << frames.status().ToString();
  return frames.ok() ? *frames : std::vector<Frame>{};
}

inline pb::Envelope ParseEnvelope(const Frame& f) {
  pb::Envelope e;
  EXPECT_TRUE(e.ParseFromArray(f.data(), static_cast<int>(f.size())));
  return e;
}

inline Frame Serialize(const pb::Envelope& e) {
  const std::string s = e.SerializeAsString();
  return Frame(s.begin(), s.end());
}

inline Frame Rewrite(const Frame& f, const std::function<void(pb::Envelope&)>& edit) {
  pb::Envelope e = ParseEnvelope(f);
  edit(e);
  return Serialize(e);
}

// Adds frames[from..] to `r`; the last completes `sent` (its hash filled in).
inline void ExpectRestCompletes(Reassembler& r, const std::vector<Frame>& frames, size_t from, const Message& sent) {
  for (size_t i = from; i < frames.size(); ++i) {
    auto added = r.Add(frames[i]);
    ASSERT_TRUE(added.ok()) << "frame " << i << ": " << added.status().ToString();
    if (i + 1 < frames.size()) {
      ASSERT_FALSE(added->has_value()) << "complete before its last frame " << i;
    } else {
      ASSERT_TRUE(added->has_value());
      EXPECT_TRUE(**added == WithHash(sent));
    }
  }
}

}  // namespace fedmesh::wire
