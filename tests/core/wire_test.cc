// Wire codec: every message type survives Encode -> Decode field by field, large tensors
// cross in many chunks bit-exactly, and the Reassembler keeps what it had when a frame is
// refused. Hostile and damaged input: wire_hostile_test.cc; helpers: wire_test_util.h.
#include "tests/core/wire_test_util.h"

namespace fedmesh::wire {
namespace {

using fedmesh::testing::HasCode;

// ---------------------------------------------------------------------------------------
// Round trips

TEST(WireRoundTrip, RegisterFieldByField) {
  Register reg;
  reg.node_id = "node-7";
  reg.num_examples = 60000;
  reg.capabilities = {"codec:none", "codec:fp16", "device:cuda"};
  const Message m{TestHeader(), reg};
  auto frames = MustEncode(m);
  ASSERT_EQ(frames.size(), 1u);
  auto got = Decode(frames);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->header.federation_id, "fed-hospitals");
  EXPECT_EQ(got->header.sender_id, "node-7");
  EXPECT_EQ(got->header.round, 5u);
  EXPECT_EQ(got->header.model_version, 12u);
  EXPECT_EQ(got->header.message_id, 42u);
  ASSERT_EQ(TypeOf(got->body), MessageType::kRegister);
  const auto& r = std::get<Register>(got->body);
  EXPECT_EQ(r.node_id, "node-7");
  EXPECT_EQ(r.num_examples, 60000u);
  EXPECT_EQ(r.capabilities, (std::vector<std::string>{"codec:none", "codec:fp16", "device:cuda"}));
  EXPECT_TRUE(*got == m);
}

TEST(WireRoundTrip, RegisterAckFieldByField) {
  const Message m{TestHeader(), RegisterAck{"node-7", 2500}};
  auto got = Decode(MustEncode(m));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto& a = std::get<RegisterAck>(got->body);
  EXPECT_EQ(a.node_id, "node-7");
  EXPECT_EQ(a.heartbeat_interval_ms, 2500u);
  EXPECT_TRUE(got->header == m.header);
  EXPECT_TRUE(*got == m);
}

TEST(WireRoundTrip, FitTaskFieldByField) {
  // Bit patterns a float round trip could damage: -0, denormals, extremes.
  std::vector<float> model = Values(1000, 1);
  model[0] = -0.0f;
  model[1] = std::numeric_limits<float>::denorm_min();
  model[2] = std::numeric_limits<float>::max();
  model[3] = std::numeric_limits<float>::lowest();
  const Message m = FitTaskMessage(model, {{10, 50}, {50}, {449}, {}});  // {} = scalar
  WireLimits l;
  l.max_chunk_bytes = 1000;  // 4,000 bytes: chunks of 1000
  auto frames = MustEncode(m, l);
  ASSERT_EQ(frames.size(), 1u + 4u);
  auto got = Decode(frames, l);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto& t = std::get<FitTask>(got->body);
  EXPECT_EQ(t.round, 5u);
  EXPECT_EQ(t.local_epochs, 3u);
  EXPECT_EQ(t.batch_size, 64u);
  EXPECT_EQ(t.learning_rate, 0.05);
  EXPECT_EQ(t.momentum, 0.9);
  EXPECT_EQ(t.prox_mu, 0.01);
  EXPECT_EQ(t.deadline_unix_ms, 1700000000123u);
  EXPECT_EQ(t.update_codec, "topk:0.01|fp16|zstd");
  EXPECT_EQ(t.global_model.codec, "none");
  EXPECT_EQ(t.global_model.dtype, DType::kFloat32);
  EXPECT_EQ(t.global_model.element_count, 1000u);
  EXPECT_EQ(t.global_model.shapes, (std::vector<std::vector<uint64_t>>{{10, 50}, {50}, {449}, {}}));
  ASSERT_TRUE(t.global_model.digest.has_value());
  EXPECT_EQ(*t.global_model.digest, HashPayload(DigestKind::kBlake3, std::get<FitTask>(m.body).global_model.bytes));
  auto floats = PayloadFloats(t.global_model);
  ASSERT_TRUE(floats.ok());
  ASSERT_EQ(floats->size(), model.size());
  EXPECT_EQ(std::memcmp(floats->data(), model.data(), model.size() * 4), 0);
  EXPECT_TRUE(std::signbit((*floats)[0]));
  EXPECT_TRUE(*got == WithHash(m));
}

TEST(WireRoundTrip, FitResultFieldByField) {
  const std::vector<float> update = Values(777, 2);
  const Message m = FitResultMessage(update);
  auto got = Decode(MustEncode(m));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto& r = std::get<FitResult>(got->body);
  EXPECT_EQ(r.round, 5u);
  EXPECT_EQ(r.num_examples, 6000u);
  EXPECT_EQ(r.train_loss, 0.4375);
  EXPECT_EQ(r.bytes_before_codec, 777u * 4);
  EXPECT_EQ(r.bytes_after_codec, 777u * 4);
  EXPECT_EQ(r.update.element_count, 777u);
  EXPECT_TRUE(r.update.shapes.empty());
  auto floats = PayloadFloats(r.update);
  ASSERT_TRUE(floats.ok());
  EXPECT_EQ(*floats, update);
  EXPECT_TRUE(*got == WithHash(m));
}

// A site's DP-SGD report travels with its update (a SecAggMaskedInput's is checked the
// same way); absent by default; a NaN or negative epsilon or a delta outside (0, 1) is
// refused on both sides.
TEST(WireRoundTrip, RecordPrivacyReportTravelsAndIsChecked) {
  Message m = FitResultMessage(Values(16, 30));
  auto got = Decode(MustEncode(m));
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(std::get<FitResult>(got->body).record_privacy.has_value());
  std::get<FitResult>(m.body).record_privacy = RecordPrivacyReport{1.25, 1e-5, 470};
  got = Decode(MustEncode(m));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(std::get<FitResult>(got->body).record_privacy.has_value());
  EXPECT_EQ(*std::get<FitResult>(got->body).record_privacy, (RecordPrivacyReport{1.25, 1e-5, 470}));
  EXPECT_TRUE(*got == WithHash(m));
  for (const auto& [bad, text] : std::vector<std::pair<RecordPrivacyReport, std::string>>{
           {{NAN, 1e-5, 1}, "record_privacy epsilon is nan; it must be finite and >= 0"},
           {{-0.5, 1e-5, 1}, "record_privacy epsilon is -0.5"},
           {{1.0, 0.0, 1}, "record_privacy delta is 0; it must be in (0, 1)"},
           {{1.0, 1.0, 1}, "record_privacy delta is 1"}}) {
    Message b = FitResultMessage(Values(16, 30));
    std::get<FitResult>(b.body).record_privacy = bad;
    EXPECT_TRUE(HasCode(Encode(b).status(), StatusCode::kInvalidArgument, text)) << text;
    std::vector<Frame> f = MustEncode(FitResultMessage(Values(16, 30)));
    f[0] = Rewrite(f[0], [&](pb::Envelope& e) {
      auto* r = e.mutable_fit_result()->mutable_record_privacy();
      r->set_epsilon(bad.epsilon);
      r->set_delta(bad.delta);
    });
    EXPECT_TRUE(HasCode(Decode(f).status(), StatusCode::kInvalidArgument, text)) << text;
  }
}

// Federated evaluation: an evaluate_only FitTask and the evaluation FitResult that answers
// it (metrics by name, no update) survive the round trip; metrics outside an evaluation,
// an evaluation carrying an update, NaN or badly named metrics, and an evaluation task
// with secagg are refused.
TEST(WireRoundTrip, FederatedEvaluationFields) {
  Message task = FitTaskMessage(Values(10, 1));
  std::get<FitTask>(task.body).evaluate_only = true;
  auto got_task = Decode(MustEncode(task));
  ASSERT_TRUE(got_task.ok()) << got_task.status().ToString();
  EXPECT_TRUE(std::get<FitTask>(got_task->body).evaluate_only);

  FitResult r;
  r.round = 5;
  r.num_examples = 321;
  r.train_loss = 0.25;
  r.update = FloatPayload({});
  r.evaluation = true;
  r.metrics = {{"accuracy", 0.875}, {"auc", 0.9375}, {"macro_f1", 0.5}};
  Message result{TestHeader(), r};
  result.header.round = 5;
  auto got = Decode(MustEncode(result));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto& back = std::get<FitResult>(got->body);
  EXPECT_TRUE(back.evaluation);
  EXPECT_EQ(back.num_examples, 321u);
  EXPECT_EQ(back.metrics, r.metrics);

  auto refused = [&](const std::function<void(FitResult&)>& edit, const std::string& fragment) {
    Message bad = result;
    edit(std::get<FitResult>(bad.body));
    auto frames = Encode(bad);
    ASSERT_FALSE(frames.ok()) << fragment;
    EXPECT_NE(frames.status().message().find(fragment), std::string::npos)
        << frames.status().ToString();
  };
  refused([](FitResult& f) { f.evaluation = false; }, "metrics but is not an evaluation");
  refused([](FitResult& f) { f.metrics["auc"] = std::nan(""); }, "metric auc");
  refused([](FitResult& f) { f.metrics["has space"] = 1.0; }, "metric names");
  refused([](FitResult& f) {
    f.update = FloatPayload(std::vector<float>{1.0f});
    f.bytes_after_codec = 4;
  }, "evaluation carries an update");
  refused([](FitResult& f) {
    for (int i = 0; i < 65; ++i) f.metrics["m" + std::to_string(i)] = 1.0;
  }, "the limit is 64");
  Message secagg_task = task;
  std::get<FitTask>(secagg_task.body).secagg = SecAggParameters{};
  std::get<FitTask>(secagg_task.body).secagg->clip = 1.0;
  std::get<FitTask>(secagg_task.body).secagg->bits = 16;
  std::get<FitTask>(secagg_task.body).secagg->min_clients = 2;
  std::get<FitTask>(secagg_task.body).secagg->max_clients = 8;
  auto bad_task = Encode(secagg_task);
  ASSERT_FALSE(bad_task.ok());
  EXPECT_NE(bad_task.status().message().find("evaluate_only"), std::string::npos)
      << bad_task.status().ToString();

  // The last evaluation's comparison and cross-evaluation fields.
  Message last = task;
  auto& lt = std::get<FitTask>(last.body);
  lt.finetune_epochs = 5;
  lt.local_only_epochs = 30;
  lt.collect_local_models = true;
  lt.candidate = "site-3";
  auto got_last = Decode(MustEncode(last));
  ASSERT_TRUE(got_last.ok()) << got_last.status().ToString();
  EXPECT_EQ(std::get<FitTask>(got_last->body), std::get<FitTask>(WithHash(last).body));
  Message not_eval = last;
  std::get<FitTask>(not_eval.body).evaluate_only = false;
  EXPECT_FALSE(Encode(not_eval).ok()) << "finetune / candidate without evaluate_only";
  std::get<FitTask>(last.body).candidate = "has space";
  EXPECT_FALSE(Encode(last).ok()) << "candidate follows the id rules";
  std::get<FitTask>(last.body).candidate = "";
  std::get<FitTask>(last.body).local_only_epochs = kMaxEvalEpochs + 1;
  EXPECT_FALSE(Encode(last).ok());

  Message shared = result;
  auto& sr = std::get<FitResult>(shared.body);
  sr.local_model = true;
  sr.update = FloatPayload(std::vector<float>{1.0f, -2.0f});
  sr.bytes_before_codec = sr.bytes_after_codec = 8;
  auto got_shared = Decode(MustEncode(shared));
  ASSERT_TRUE(got_shared.ok()) << got_shared.status().ToString();
  EXPECT_TRUE(std::get<FitResult>(got_shared->body).local_model);
  refused([](FitResult& f) {
    f.update = FloatPayload(std::vector<float>{1.0f});
    f.bytes_after_codec = 4;
  }, "evaluation carries an update");  // without local_model
  std::get<FitResult>(shared.body).evaluation = false;
  std::get<FitResult>(shared.body).metrics.clear();
  auto bad_shared = Encode(shared);
  ASSERT_FALSE(bad_shared.ok());
  EXPECT_NE(bad_shared.status().message().find("local_model"), std::string::npos);
}

TEST(WireRoundTrip, HeartbeatFieldByField) {
  const Message m{TestHeader(7), Heartbeat{123456789}};
  auto got = Decode(MustEncode(m));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::get<Heartbeat>(got->body).sequence, 123456789u);
  EXPECT_EQ(got->header.message_id, 7u);
  EXPECT_TRUE(*got == m);
}

TEST(WireRoundTrip, RejectFieldByFieldKeepsUnknownReasonValues) {
  for (RejectReason reason : {RejectReason::kLate, static_cast<RejectReason>(99)}) {
    const Message m{TestHeader(), Reject{reason, "update arrived after the deadline", 41}};
    auto got = Decode(MustEncode(m));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const auto& r = std::get<Reject>(got->body);
    EXPECT_EQ(r.reason, reason);
    EXPECT_EQ(r.text, "update arrived after the deadline");
    EXPECT_EQ(r.rejected_message_id, 41u);
    EXPECT_TRUE(*got == m);
  }
}

TEST(WireRoundTrip, EmptyPayloadIsOneFrame) {
  const Message m = FitResultMessage({});
  auto frames = MustEncode(m);
  ASSERT_EQ(frames.size(), 1u);
  auto got = Decode(frames);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto& u = std::get<FitResult>(got->body).update;
  EXPECT_EQ(u.element_count, 0u);
  EXPECT_TRUE(u.bytes.empty());
  // BLAKE3 of no bytes (the specification's test vector).
  EXPECT_EQ(DigestText(*u.digest),
            "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
}

// Codecs other than "none" are opaque bytes to the wire layer: any length, no float checks.
TEST(WireRoundTrip, OtherCodecBytesPassThroughUnchanged) {
  Message m = FitResultMessage({});
  auto& u = std::get<FitResult>(m.body).update;
  u.codec = "topk:0.01|zstd";
  u.element_count = 1000000;
  u.bytes = {0xff, 0xff, 0xc0, 0x7f, 1, 2, 3};  // includes a NaN pattern; 7 bytes
  std::get<FitResult>(m.body).bytes_after_codec = 7;
  auto got = Decode(MustEncode(m));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(std::get<FitResult>(got->body).update.bytes, u.bytes);
  EXPECT_TRUE(*got == WithHash(m));
  EXPECT_TRUE(HasCode(PayloadFloats(std::get<FitResult>(got->body).update).status(),
                      StatusCode::kFailedPrecondition, "topk"));
}

// Codec chains are checked at the header, before any chunk is buffered: an unknown chain,
// and a payload larger than its chain can produce for the declared element count.
TEST(WireValidation, UnknownCodecOrOversizedCodedPayloadIsRefused) {
  Message m = FitResultMessage({});
  auto& r = std::get<FitResult>(m.body);
  r.update.codec = "gzip";
  r.update.element_count = 10;
  r.update.bytes = {1, 2, 3};
  r.bytes_after_codec = 3;
  EXPECT_TRUE(HasCode(Encode(m).status(), StatusCode::kInvalidArgument, "\"gzip\" is unknown"));
  // topk:0.1 of 1000 values: 100 varints (<= 5 bytes) + 400 value bytes = at most 900.
  r.update.codec = "topk:0.1";
  r.update.element_count = 1000;
  r.update.bytes.assign(901, 0);
  r.bytes_after_codec = 901;
  EXPECT_TRUE(HasCode(Encode(m).status(), StatusCode::kInvalidArgument, "produces at most 900"));
  r.update.bytes.assign(900, 0);
  r.bytes_after_codec = 900;
  EXPECT_TRUE(Encode(m).ok());
  // A FitTask may leave update_codec empty (the node's choice) but not name a bad one.
  Message t = FitTaskMessage(std::vector<float>{1.0f});
  std::get<FitTask>(t.body).update_codec = "";
  EXPECT_TRUE(Encode(t).ok());
  std::get<FitTask>(t.body).update_codec = "int8|topk:0.1";
  EXPECT_TRUE(HasCode(Encode(t).status(), StatusCode::kInvalidArgument, "must come before"));
}

TEST(WireRoundTrip, FloatHelpersAreLittleEndianFloat32) {
  const std::vector<float> v = {1.0f, -2.5f};
  const TensorPayload p = FloatPayload(v);
  EXPECT_EQ(p.bytes, (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc0}));
  auto back = PayloadFloats(p);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, v);
  TensorPayload bad = p;
  bad.bytes.pop_back();
  EXPECT_TRUE(HasCode(PayloadFloats(bad).status(), StatusCode::kInvalidArgument));
}

TEST(WireEncode, PresetHashMustMatchTheBytes) {
  Message m = FitResultMessage(Values(10, 3));
  auto& u = std::get<FitResult>(m.body).update;
  u.digest = HashPayload(DigestKind::kBlake3, u.bytes);
  EXPECT_TRUE(Encode(m).ok());
  u.bytes[5] ^= 1;
  EXPECT_TRUE(HasCode(Encode(m).status(), StatusCode::kInvalidArgument, "blake3:"));
}

// ---------------------------------------------------------------------------------------
// Large tensors

TEST(WireLargeTensor, TwentyMillionFloatsReassembleBitExactly) {
  const size_t n = 20'000'000;  // 80 MB
  std::vector<float> update(n);
  for (size_t i = 0; i < n; ++i) {
    // Varied finite bit patterns: random mantissa and sign, exponent kept below 0xFF.
    uint32_t bits = static_cast<uint32_t>(SplitMix64(i));
    if ((bits & 0x7F800000u) == 0x7F800000u) bits &= ~0x00800000u;
    std::memcpy(&update[i], &bits, 4);
  }
  const Message m = FitResultMessage(update);
  WireLimits l;
  l.max_chunk_bytes = size_t{1} << 20;  // 1 MiB: 77 chunks
  const auto t0 = std::chrono::steady_clock::now();
  auto frames = MustEncode(m, l);
  const auto t1 = std::chrono::steady_clock::now();
  ASSERT_EQ(frames.size(), 1u + 77u);
  for (const auto& f : frames) EXPECT_LE(f.size(), MaxFrameBytes(l));
  EXPECT_GT(frames[1].size(), kMiB);  // a full chunk, parsed through the ChunkFrame view

  // Frame by frame through a Reassembler: nothing until the last chunk.
  Reassembler r(l);
  std::optional<Message> got;
  for (size_t i = 0; i < frames.size(); ++i) {
    auto added = r.Add(frames[i]);
    ASSERT_TRUE(added.ok()) << "frame " << i << ": " << added.status().ToString();
    ASSERT_EQ(added->has_value(), i + 1 == frames.size()) << "frame " << i;
    if (added->has_value()) got = std::move(**added);
  }
  const auto t2 = std::chrono::steady_clock::now();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(r.pending_messages(), 0u);
  EXPECT_EQ(r.pending_declared_bytes(), 0u);
  const auto& u = std::get<FitResult>(got->body).update;
  ASSERT_EQ(u.bytes.size(), n * 4);
  EXPECT_EQ(std::memcmp(u.bytes.data(), update.data(), n * 4), 0);
  auto floats = PayloadFloats(u);
  ASSERT_TRUE(floats.ok());
  EXPECT_EQ(std::memcmp(floats->data(), update.data(), n * 4), 0);
  std::printf("[ info ] 80 MB in %zu frames: encode %.0f ms, reassemble %.0f ms\n", frames.size(),
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t2 - t1).count());

  // Decode of the whole sequence gives the same message.
  auto decoded = Decode(frames, l);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(*decoded == *got);
}

// ---------------------------------------------------------------------------------------
// Reassembler behaviour

TEST(WireReassembler, InterleavedMessagesFromTwoSenders) {
  WireLimits l;
  l.max_chunk_bytes = 256;
  const auto ua = Values(300, 4), ub = Values(500, 5);
  // Same message id from two senders: keys are (sender, message id).
  auto fa = MustEncode(FitResultMessage(ua, 9, "node-a"), l);
  auto fb = MustEncode(FitResultMessage(ub, 9, "node-b"), l);
  Reassembler r(l);
  std::vector<Message> done;
  size_t ia = 0, ib = 0;
  while (ia < fa.size() || ib < fb.size()) {
    for (auto* p : {&ia, &ib}) {
      auto& frames = (p == &ia) ? fa : fb;
      if (*p >= frames.size()) continue;
      auto added = r.Add(frames[(*p)++]);
      ASSERT_TRUE(added.ok()) << added.status().ToString();
      if (added->has_value()) done.push_back(std::move(**added));
    }
  }
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].header.sender_id, "node-a");  // a has fewer chunks, finishes first
  EXPECT_EQ(*PayloadFloats(std::get<FitResult>(done[0].body).update), ua);
  EXPECT_EQ(done[1].header.sender_id, "node-b");
  EXPECT_EQ(*PayloadFloats(std::get<FitResult>(done[1].body).update), ub);
}

// A rejected frame costs nothing: the pending message keeps its chunks and completes
// when the right frames follow.
TEST(WireReassembler, RejectedFrameLosesNothing) {
  WireLimits l;
  l.max_chunk_bytes = 400;
  const auto update = Values(400, 6);  // 1600 bytes: 4 chunks
  const Message m = FitResultMessage(update);
  auto frames = MustEncode(m, l);
  ASSERT_EQ(frames.size(), 5u);
  Reassembler r(l);
  ASSERT_TRUE(r.Add(frames[0]).ok());
  ASSERT_TRUE(r.Add(frames[1]).ok());
  const uint64_t allocated = r.allocated_bytes();

  const Frame short_chunk =
      Rewrite(frames[2], [](pb::Envelope& e) { e.mutable_chunk()->mutable_data()->pop_back(); });
  const Frame truncated(frames[2].begin(), frames[2].end() - 1);
  const Frame skipped = frames[3];
  const Frame wrong_round =
      Rewrite(frames[2], [](pb::Envelope& e) { e.mutable_header()->set_round(6); });
  const std::pair<const Frame*, const char*> bad[] = {
      {&short_chunk, "carries 399 bytes; 400 were declared"},
      {&truncated, "not a valid"},
      {&skipped, "chunk 2 of message 42 from 'node-7' arrived when chunk 1 of 4 was expected"},
      {&wrong_round, "differs from its message's"},
      {&frames[0], "already has message 42"},
  };
  for (const auto& [frame, needle] : bad) {
    auto added = r.Add(*frame);
    EXPECT_FALSE(added.ok());
    EXPECT_NE(added.status().message().find(needle), std::string::npos)
        << added.status().ToString();
    EXPECT_EQ(r.pending_messages(), 1u);
    EXPECT_EQ(r.pending_declared_bytes(), 1600u);
    EXPECT_EQ(r.allocated_bytes(), allocated);
  }
  ExpectRestCompletes(r, frames, 2, m);
}

// Memory follows the bytes that arrived, not the size a header claims.
TEST(WireReassembler, AllocatesOnlyAsBytesArrive) {
  const uint64_t kTerabyte = uint64_t{1} << 40;
  WireLimits l;
  l.max_chunk_bytes = kMiB;
  l.max_payload_bytes = kTerabyte;
  l.max_pending_bytes = kTerabyte;
  l.max_elements = kTerabyte / 4;
  l.max_chunks = 1 << 20;
  auto frames = MustEncode(FitResultMessage(Values(kMiB / 4 * 2, 7)), l);  // 2 chunks
  ASSERT_EQ(frames.size(), 3u);
  const Frame header = Rewrite(frames[0], [&](pb::Envelope& e) {
    auto* r = e.mutable_fit_result();
    r->set_bytes_after_codec(kTerabyte);
    r->mutable_update()->set_payload_bytes(kTerabyte);
    r->mutable_update()->set_element_count(kTerabyte / 4);
    r->mutable_update()->set_chunk_count(1 << 20);
  });
  const Frame chunk0 =
      Rewrite(frames[1], [](pb::Envelope& e) { e.mutable_chunk()->set_count(1 << 20); });
  Reassembler r(l);
  auto added = r.Add(header);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_FALSE(added->has_value());
  EXPECT_EQ(r.pending_declared_bytes(), kTerabyte);
  EXPECT_EQ(r.allocated_bytes(), 0u);
  added = r.Add(chunk0);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_GE(r.allocated_bytes(), kMiB);
  EXPECT_LE(r.allocated_bytes(), 2 * kMiB);
  EXPECT_TRUE(r.Drop("node-7", 42));
  EXPECT_FALSE(r.Drop("node-7", 42));
  EXPECT_EQ(r.pending_messages(), 0u);
  EXPECT_EQ(r.pending_declared_bytes(), 0u);
  EXPECT_EQ(r.allocated_bytes(), 0u);
}

TEST(WireReassembler, FullReassemblerRefusesNewMessagesButKeepsItsOwn) {
  WireLimits l;
  l.max_chunk_bytes = 64;
  l.max_pending_messages = 1;
  auto fa = MustEncode(FitResultMessage(Values(32, 8), 1, "node-a"), l);
  auto fb = MustEncode(FitResultMessage(Values(32, 9), 2, "node-b"), l);
  Reassembler r(l);
  ASSERT_TRUE(r.Add(fa[0]).ok());
  EXPECT_TRUE(HasCode(r.Add(fb[0]).status(), StatusCode::kOutOfRange, "max_pending_messages"));
  for (size_t i = 1; i + 1 < fa.size(); ++i) ASSERT_TRUE(r.Add(fa[i]).ok());
  auto last = r.Add(fa.back());
  ASSERT_TRUE(last.ok() && last->has_value());

  WireLimits bytes_limit = l;
  bytes_limit.max_pending_messages = 8;
  bytes_limit.max_pending_bytes = 200;  // each message declares 128 bytes
  Reassembler r2(bytes_limit);
  ASSERT_TRUE(r2.Add(fa[0]).ok());
  EXPECT_TRUE(HasCode(r2.Add(fb[0]).status(), StatusCode::kOutOfRange, "max_pending_bytes"));
  EXPECT_EQ(r2.pending_declared_bytes(), 128u);
}

TEST(WireReassembler, ChunkOfAnotherSenderMatchesNothing) {
  WireLimits l;
  l.max_chunk_bytes = 64;
  auto fa = MustEncode(FitResultMessage(Values(32, 10), 1, "node-a"), l);
  auto fb = MustEncode(FitResultMessage(Values(32, 11), 1, "node-b"), l);
  Reassembler r(l);
  ASSERT_TRUE(r.Add(fa[0]).ok());
  EXPECT_TRUE(HasCode(r.Add(fb[1]).status(), StatusCode::kCorruption, "matches no pending"));
  // A chunk relabelled to node-a's message still fails: its bytes do not hash right.
  ASSERT_TRUE(r.Add(fa[1]).ok());
  const Frame forged =
      Rewrite(fb[2], [](pb::Envelope& e) { e.mutable_header()->set_sender_id("node-a"); });
  EXPECT_TRUE(HasCode(r.Add(forged).status(), StatusCode::kCorruption, "fails its blake3 check"));
  EXPECT_EQ(r.pending_messages(), 0u);  // a completed message that fails is dropped
}

TEST(WireRoundTrip, UpdatePredictionFlagsTravelAndAreChecked) {
  Message task = FitTaskMessage(Values(8, 27));  // 8 values: a 4-parameter model and its p
  std::get<FitTask>(task.body).with_prediction = true;
  auto got = Decode(MustEncode(task));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(std::get<FitTask>(got->body).with_prediction);
  EXPECT_TRUE(*got == WithHash(task));
  Message result = FitResultMessage(Values(4, 28));
  std::get<FitResult>(result.body).applied_prediction = true;
  got = Decode(MustEncode(result));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(std::get<FitResult>(got->body).applied_prediction);
  // Flags off by default: what every older sender writes.
  got = Decode(MustEncode(FitResultMessage(Values(4, 28))));
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(std::get<FitResult>(got->body).applied_prediction);

  // A model with its prediction has an even, non-zero number of values, and never comes
  // with secure aggregation: both on the sender and on the receiver.
  Message odd = FitTaskMessage(Values(7, 29));
  std::get<FitTask>(odd.body).with_prediction = true;
  EXPECT_TRUE(HasCode(Encode(odd).status(), StatusCode::kInvalidArgument,
                      "FitTask with_prediction has global_model.element_count 7; it must be 2n"));
  std::vector<Frame> f = MustEncode(FitTaskMessage(Values(7, 29)));
  f[0] = Rewrite(f[0], [](pb::Envelope& e) { e.mutable_fit_task()->set_with_prediction(true); });
  EXPECT_TRUE(HasCode(Decode(f).status(), StatusCode::kInvalidArgument,
                      "with_prediction has global_model.element_count 7"));
  Message both = task;
  std::get<FitTask>(both.body).secagg = SecAggParameters{0, 0, 1.0, 16, 2, 10, 0.0};
  EXPECT_TRUE(HasCode(Encode(both).status(), StatusCode::kInvalidArgument,
                      "with_prediction and secagg are both set"));
}

TEST(WireEncode, InvalidLimitsAreInvalidArgument) {
  WireLimits l;
  l.max_chunk_bytes = 0;
  const Message m{TestHeader(), Heartbeat{1}};
  EXPECT_TRUE(HasCode(Encode(m, l).status(), StatusCode::kInvalidArgument, "max_chunk_bytes"));
  Reassembler r(l);
  EXPECT_TRUE(
      HasCode(r.Add(MustEncode(m)[0]).status(), StatusCode::kInvalidArgument, "max_chunk_bytes"));
  l.max_chunk_bytes = size_t{2} << 30;
  EXPECT_TRUE(HasCode(Encode(m, l).status(), StatusCode::kInvalidArgument, "max_chunk_bytes"));
}

}  // namespace
}  // namespace fedmesh::wire
