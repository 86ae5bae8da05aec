// Wire codec against hostile and damaged input: garbage, truncated, oversized, reordered or
// inconsistent frames and meaningless field values are refused with the documented status
// code, before anything large is allocated.
#include "tests/core/wire_test_util.h"

namespace fedmesh::wire {
namespace {

using fedmesh::testing::HasCode;

// ---------------------------------------------------------------------------------------
// Hostile and damaged input

TEST(WireHostile, GarbageFrameIsCorruption) {
  const std::string text = "this is not a protobuf";
  const Frame garbage_text(text.begin(), text.end());
  const Frame garbage_ff(64, 0xff);
  EXPECT_TRUE(HasCode(Decode(std::vector<Frame>{garbage_text}).status(), StatusCode::kCorruption));
  EXPECT_TRUE(HasCode(Decode(std::vector<Frame>{garbage_ff}).status(), StatusCode::kCorruption));
  EXPECT_TRUE(
      HasCode(Decode(std::vector<Frame>{Frame{}}).status(), StatusCode::kCorruption, "empty"));
  EXPECT_TRUE(HasCode(Decode(std::vector<Frame>{}).status(), StatusCode::kCorruption));
}

TEST(WireHostile, RandomFramesAreNeverAccepted) {
  Rng rng(2024);
  int corruption = 0;
  for (int i = 0; i < 3000; ++i) {
    Frame f(1 + rng.UniformInt(300));
    for (auto& b : f) b = static_cast<uint8_t>(rng.NextU64());
    auto got = Decode(std::vector<Frame>{f});
    ASSERT_FALSE(got.ok()) << "random frame " << i << " decoded";
    corruption += got.status().code() == StatusCode::kCorruption;
  }
  EXPECT_GT(corruption, 2900);
}

// Cutting a header frame anywhere is detected: the body comes last and is length-prefixed.
TEST(WireHostile, TruncatedHeaderFrameIsCorruptionAtEveryLength) {
  Register reg{"node-7", 10, {"codec:none"}};
  const Message messages[] = {
      {TestHeader(), reg},
      FitTaskMessage(Values(16, 12), {{4, 4}}),
      FitResultMessage(Values(16, 13)),
      {TestHeader(), Heartbeat{0}},
      {TestHeader(), Reject{RejectReason::kUnspecified, "", 0}},
  };
  for (const Message& m : messages) {
    const Frame header = MustEncode(m)[0];
    for (size_t len = 0; len < header.size(); ++len) {
      const Frame cut(header.begin(), header.begin() + len);
      Reassembler r;
      ASSERT_TRUE(HasCode(r.Add(cut).status(), StatusCode::kCorruption))
          << MessageTypeName(TypeOf(m.body)) << " cut to " << len << " of " << header.size();
    }
  }
}

TEST(WireHostile, OversizedHeaderFrameIsOutOfRange) {
  Register reg;
  reg.node_id = "node-7";
  for (int i = 0; i < 20000; ++i)
    reg.capabilities.push_back("capability-" + std::to_string(i) + std::string(80, 'x'));
  const Message m{TestHeader(), reg};
  // The sender's own limits refuse it.
  EXPECT_TRUE(HasCode(Encode(m).status(), StatusCode::kOutOfRange, "max_capabilities"));
  WireLimits loose;
  loose.max_capabilities = 100000;
  EXPECT_TRUE(HasCode(Encode(m, loose).status(), StatusCode::kOutOfRange, "max_header_bytes"));
  loose.max_header_bytes = 4 * kMiB;
  auto frames = MustEncode(m, loose);
  ASSERT_EQ(frames.size(), 1u);
  ASSERT_GT(frames[0].size(), kMiB);
  // A receiver with default limits refuses the 2 MB header frame...
  EXPECT_TRUE(HasCode(Decode(frames).status(), StatusCode::kOutOfRange, "max_header_bytes"));
  // ...and a frame beyond header + chunk limits without parsing it.
  const std::vector<Frame> huge{Frame(MaxFrameBytes(WireLimits{}) + 1, 0x0a)};
  EXPECT_TRUE(HasCode(Decode(huge).status(), StatusCode::kOutOfRange,
                      "max_header_bytes + max_chunk_bytes"));
}

TEST(WireHostile, WrongProtocolVersionIsFailedPrecondition) {
  const auto frames = MustEncode(Message{TestHeader(), Heartbeat{1}});
  for (uint32_t version : {0u, 2u, 77u}) {
    const Frame f = Rewrite(
        frames[0], [&](pb::Envelope& e) { e.mutable_header()->set_protocol_version(version); });
    const Status s = Decode(std::vector<Frame>{f}).status();
    EXPECT_TRUE(HasCode(s, StatusCode::kFailedPrecondition,
                        "protocol version " + std::to_string(version) + "; this build speaks 1"));
  }
}

TEST(WireHostile, MissingOrBadIdsAreRejected) {
  const auto frames = MustEncode(Message{TestHeader(), Heartbeat{1}});
  auto with = [&](const std::function<void(pb::Header*)>& edit) {
    return Decode(std::vector<Frame>{
                      Rewrite(frames[0], [&](pb::Envelope& e) { edit(e.mutable_header()); })})
        .status();
  };
  EXPECT_TRUE(HasCode(with([](pb::Header* h) { h->clear_federation_id(); }),
                      StatusCode::kInvalidArgument, "federation_id is empty"));
  EXPECT_TRUE(HasCode(with([](pb::Header* h) { h->clear_sender_id(); }),
                      StatusCode::kInvalidArgument, "sender_id is empty"));
  EXPECT_TRUE(HasCode(with([](pb::Header* h) { h->set_sender_id("node\n7"); }),
                      StatusCode::kInvalidArgument, "byte 0x0a at offset 4"));
  EXPECT_TRUE(HasCode(with([](pb::Header* h) { h->set_sender_id(std::string(257, 'n')); }),
                      StatusCode::kOutOfRange, "max_id_bytes"));
  const Frame no_header = Rewrite(frames[0], [](pb::Envelope& e) { e.clear_header(); });
  EXPECT_TRUE(HasCode(Decode(std::vector<Frame>{no_header}).status(), StatusCode::kCorruption,
                      "no header"));
  // The sender refuses the same.
  Message m{TestHeader(), Heartbeat{1}};
  m.header.federation_id.clear();
  EXPECT_TRUE(HasCode(Encode(m).status(), StatusCode::kInvalidArgument, "federation_id"));
}

// A header claiming a terabyte payload is refused from its declared size alone.
TEST(WireHostile, DeclaredPayloadOverLimitFailsBeforeAllocating) {
  const uint64_t kTerabyte = uint64_t{1} << 40;
  const auto frames = MustEncode(FitResultMessage(Values(16, 14)));
  const Frame header = Rewrite(frames[0], [&](pb::Envelope& e) {
    auto* r = e.mutable_fit_result();
    r->set_bytes_after_codec(kTerabyte);
    r->mutable_update()->set_payload_bytes(kTerabyte);
    r->mutable_update()->set_element_count(kTerabyte / 4);
    r->mutable_update()->set_chunk_bytes(8 * kMiB);
    r->mutable_update()->set_chunk_count(kTerabyte / (8 * kMiB));
  });
  Reassembler r;
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = r.Add(header).status();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(HasCode(s, StatusCode::kOutOfRange, "1099511627776 payload bytes"));
  EXPECT_TRUE(HasCode(s, StatusCode::kOutOfRange, "max_payload_bytes"));
  EXPECT_LT(ms, 100.0);
  EXPECT_EQ(r.pending_messages(), 0u);
  EXPECT_EQ(r.allocated_bytes(), 0u);
}

TEST(WireHostile, MissingPayloadFrameIsCorruption) {
  WireLimits l;
  l.max_chunk_bytes = 100;
  const auto frames = MustEncode(FitResultMessage(Values(100, 15)), l);  // 4 chunks
  ASSERT_EQ(frames.size(), 5u);
  std::vector<Frame> middle_gone = frames;
  middle_gone.erase(middle_gone.begin() + 2);
  EXPECT_TRUE(HasCode(Decode(middle_gone, l).status(), StatusCode::kCorruption,
                      "chunk 1 of 4 was expected"));
  std::vector<Frame> last_gone = frames;
  last_gone.pop_back();
  EXPECT_TRUE(
      HasCode(Decode(last_gone, l).status(), StatusCode::kCorruption, "end after chunk 3 of 4"));
  const std::vector<Frame> header_gone(frames.begin() + 1, frames.end());
  EXPECT_TRUE(HasCode(Decode(header_gone, l).status(), StatusCode::kCorruption,
                      "matches no pending message"));
}

TEST(WireHostile, ExtraFrameIsCorruption) {
  WireLimits l;
  l.max_chunk_bytes = 100;
  const auto frames = MustEncode(FitResultMessage(Values(100, 16)), l);
  std::vector<Frame> repeated = frames;
  repeated.push_back(frames.back());
  EXPECT_TRUE(
      HasCode(Decode(repeated, l).status(), StatusCode::kCorruption, "1 more frame(s) follow"));
  std::vector<Frame> repeated_middle = frames;
  repeated_middle.insert(repeated_middle.begin() + 2, frames[2]);
  EXPECT_TRUE(HasCode(Decode(repeated_middle, l).status(), StatusCode::kCorruption,
                      "chunk 2 of 4 was expected"));
  // Two messages in one sequence.
  auto hb = MustEncode(Message{TestHeader(), Heartbeat{3}});
  hb.push_back(hb[0]);
  EXPECT_TRUE(HasCode(Decode(hb).status(), StatusCode::kCorruption, "exactly one message"));
  std::vector<Frame> two{frames[0], hb[0]};
  EXPECT_TRUE(HasCode(Decode(two, l).status(), StatusCode::kCorruption, "began another"));
}

TEST(WireHostile, TruncatedPayloadFrameIsCorruption) {
  WireLimits l;
  l.max_chunk_bytes = 100;
  auto frames = MustEncode(FitResultMessage(Values(100, 17)), l);
  std::vector<Frame> cut = frames;
  cut[3].resize(cut[3].size() - 10);  // the data field now overruns the frame
  EXPECT_TRUE(HasCode(Decode(cut, l).status(), StatusCode::kCorruption, "frame 3 of 5"));
  std::vector<Frame> short_data = frames;
  short_data[4] =
      Rewrite(frames[4], [](pb::Envelope& e) { e.mutable_chunk()->mutable_data()->resize(50); });
  EXPECT_TRUE(HasCode(Decode(short_data, l).status(), StatusCode::kCorruption,
                      "carries 50 bytes; 100 were declared"));
}

TEST(WireHostile, FlippedPayloadByteIsCorruption) {
  WireLimits l;
  l.max_chunk_bytes = 100;
  auto frames = MustEncode(FitResultMessage(Values(100, 18)), l);
  // The chunk data is the last field of the frame: flip its last byte.
  frames[2].back() ^= 0x01;
  EXPECT_TRUE(HasCode(Decode(frames, l).status(), StatusCode::kCorruption, "fails its blake3 check"));
  // A damaged declared hash is caught the same way.
  auto frames2 = MustEncode(FitResultMessage(Values(100, 18)), l);
  frames2[0] = Rewrite(frames2[0], [](pb::Envelope& e) {
    (*e.mutable_fit_result()->mutable_update()->mutable_blake3())[0] ^= 0x80;
  });
  EXPECT_TRUE(HasCode(Decode(frames2, l).status(), StatusCode::kCorruption, "blake3"));
  auto frames3 = MustEncode(FitResultMessage(Values(100, 18)), l);
  frames3[0] = Rewrite(frames3[0], [](pb::Envelope& e) {
    e.mutable_fit_result()->mutable_update()->mutable_blake3()->pop_back();
  });
  EXPECT_TRUE(HasCode(Decode(frames3, l).status(), StatusCode::kCorruption, "blake3 is 31 bytes"));
  // No digest, or both: refused before any chunk is kept.
  auto frames4 = MustEncode(FitResultMessage(Values(100, 18)), l);
  frames4[0] = Rewrite(frames4[0], [](pb::Envelope& e) {
    e.mutable_fit_result()->mutable_update()->clear_blake3();
  });
  EXPECT_TRUE(HasCode(Decode(frames4, l).status(), StatusCode::kCorruption, "carries no digest"));
  auto frames5 = MustEncode(FitResultMessage(Values(100, 18)), l);
  frames5[0] = Rewrite(frames5[0], [](pb::Envelope& e) {
    auto* u = e.mutable_fit_result()->mutable_update();
    u->set_sha256(u->blake3());
  });
  EXPECT_TRUE(HasCode(Decode(frames5, l).status(), StatusCode::kCorruption, "both"));
}

// A sender that writes SHA-256 (a build before BLAKE3, or WireLimits::payload_digest =
// kSha256) is understood, its damaged bytes caught by the SHA-256 check; a SHA-256 digest
// relabelled as BLAKE3 (or the other way round) fails.
TEST(WireHostile, Sha256PayloadsAreStillCheckedAndAccepted) {
  WireLimits l;
  l.max_chunk_bytes = 100;
  l.payload_digest = DigestKind::kSha256;
  const Message m = FitResultMessage(Values(100, 18));
  auto frames = MustEncode(m, l);
  EXPECT_TRUE(ParseEnvelope(frames[0]).fit_result().update().blake3().empty());
  auto got = Decode(frames, l);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const auto& u = std::get<FitResult>(got->body).update;
  EXPECT_EQ(*u.digest, HashPayload(DigestKind::kSha256, std::get<FitResult>(m.body).update.bytes));
  EXPECT_EQ(u.digest->bytes, Sha256::Hash(u.bytes));
  auto damaged = frames;
  damaged[2].back() ^= 0x01;
  EXPECT_TRUE(HasCode(Decode(damaged, l).status(), StatusCode::kCorruption, "fails its sha256 check"));
  auto relabelled = frames;
  relabelled[0] = Rewrite(frames[0], [](pb::Envelope& e) {
    auto* p = e.mutable_fit_result()->mutable_update();
    p->set_blake3(p->sha256());
    p->clear_sha256();
  });
  EXPECT_TRUE(HasCode(Decode(relabelled, l).status(), StatusCode::kCorruption, "fails its blake3 check"));
  // An empty payload's digest must be its kind's hash of no bytes.
  Message empty = FitResultMessage({});
  auto one = MustEncode(empty, l);
  ASSERT_EQ(one.size(), 1u);
  auto back = Decode(one, l);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(Sha256Hex(std::get<FitResult>(back->body).update.digest->bytes),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  one[0] = Rewrite(one[0], [](pb::Envelope& e) {
    auto* p = e.mutable_fit_result()->mutable_update();
    p->set_blake3(p->sha256());
    p->clear_sha256();
  });
  EXPECT_TRUE(HasCode(Decode(one, l).status(), StatusCode::kCorruption, "its blake3 is not that of no bytes"));
}

// Replaces element `index` of a codec "none" payload sent in `frames` by `value`, keeping
// the hash consistent, as a sender that does not validate would.
std::vector<Frame> WithValueAt(std::vector<Frame> frames, size_t chunk_bytes, size_t index,
                               float value) {
  std::vector<uint8_t> payload;
  for (size_t i = 1; i < frames.size(); ++i) {
    const pb::Envelope e = ParseEnvelope(frames[i]);
    const std::string& d = e.chunk().data();
    payload.insert(payload.end(), d.begin(), d.end());
  }
  std::memcpy(payload.data() + 4 * index, &value, 4);
  const Blake3Digest digest = Blake3::Hash(payload);
  frames[0] = Rewrite(frames[0], [&](pb::Envelope& e) {
    auto* p = e.has_fit_task() ? e.mutable_fit_task()->mutable_global_model()
                               : e.mutable_fit_result()->mutable_update();
    p->set_blake3(digest.data(), digest.size());
  });
  const size_t c = 1 + 4 * index / chunk_bytes;
  frames[c] = Rewrite(frames[c], [&](pb::Envelope& e) {
    const size_t off = (c - 1) * chunk_bytes;
    e.mutable_chunk()->set_data(payload.data() + off, e.chunk().data().size());
  });
  return frames;
}

TEST(WireHostile, NonFiniteValuesAreInvalidArgumentWithIndex) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> update = Values(5000, 19);
  update[1234] = nan;
  // The sender refuses.
  EXPECT_TRUE(HasCode(Encode(FitResultMessage(update)).status(), StatusCode::kInvalidArgument,
                      "FitResult.update value at index 1234 is NaN"));
  std::vector<float> model = Values(5000, 20);
  model[4999] = -inf;
  EXPECT_TRUE(HasCode(Encode(FitTaskMessage(model)).status(), StatusCode::kInvalidArgument,
                      "FitTask.global_model value at index 4999 is -Inf"));

  // The receiver refuses what an unchecked sender produced.
  WireLimits l;
  l.max_chunk_bytes = 4096;
  const auto good = MustEncode(FitResultMessage(Values(5000, 19)), l);
  EXPECT_TRUE(HasCode(Decode(WithValueAt(good, 4096, 1234, nan), l).status(),
                      StatusCode::kInvalidArgument, "value at index 1234 is NaN"));
  const auto good_task = MustEncode(FitTaskMessage(Values(5000, 20)), l);
  EXPECT_TRUE(HasCode(Decode(WithValueAt(good_task, 4096, 4000, inf), l).status(),
                      StatusCode::kInvalidArgument, "global_model value at index 4000 is +Inf"));
  // Control: the same edit with a finite value decodes.
  auto fine = Decode(WithValueAt(good, 4096, 1234, 2.5f), l);
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ((*PayloadFloats(std::get<FitResult>(fine->body).update))[1234], 2.5f);

  Message loss = FitResultMessage(Values(4, 21));
  std::get<FitResult>(loss.body).train_loss = nan;
  EXPECT_TRUE(HasCode(Encode(loss).status(), StatusCode::kInvalidArgument, "train_loss"));
}

TEST(WireHostile, ShapeErrorsAreRejected) {
  const auto model = Values(12, 22);
  // Sender side.
  EXPECT_TRUE(HasCode(Encode(FitTaskMessage(model, {{3, 5}})).status(),
                      StatusCode::kInvalidArgument,
                      "shapes describe 15 elements but "
                      "element_count is 12"));
  EXPECT_TRUE(HasCode(Encode(FitTaskMessage(model, {{1, 1, 1, 1, 1, 1, 1, 1, 12}})).status(),
                      StatusCode::kOutOfRange, "tensor 0 has 9 dims; the limit is 8"));
  EXPECT_TRUE(HasCode(Encode(FitTaskMessage(model, {{12}, {0}})).status(),
                      StatusCode::kInvalidArgument, "tensor 1 has dim 0 = 0"));
  EXPECT_TRUE(Encode(FitTaskMessage(model, {{1, 1, 1, 1, 1, 1, 3, 4}})).ok());  // 8 dims: fine

  // Receiver side.
  const auto frames = MustEncode(FitTaskMessage(model, {{3, 4}}));
  auto edit = [&](const std::function<void(pb::TensorPayload*)>& fn) {
    std::vector<Frame> f = frames;
    f[0] =
        Rewrite(f[0], [&](pb::Envelope& e) { fn(e.mutable_fit_task()->mutable_global_model()); });
    return Decode(f).status();
  };
  EXPECT_TRUE(HasCode(edit([](pb::TensorPayload* p) { p->mutable_shapes(0)->set_dims(1, 5); }),
                      StatusCode::kInvalidArgument, "shapes describe 15 elements"));
  EXPECT_TRUE(HasCode(edit([](pb::TensorPayload* p) {
                        for (int i = 0; i < 7; ++i) p->mutable_shapes(0)->add_dims(1);
                      }),
                      StatusCode::kOutOfRange, "9 dims"));
  EXPECT_TRUE(HasCode(edit([](pb::TensorPayload* p) {
                        for (int i = 0; i < 5000; ++i) p->add_shapes();
                      }),
                      StatusCode::kOutOfRange, "max_tensors"));
  EXPECT_TRUE(HasCode(edit([](pb::TensorPayload* p) {
                        p->mutable_shapes(0)->set_dims(0, uint64_t{1} << 62);
                        p->mutable_shapes(0)->set_dims(1, 16);
                      }),
                      StatusCode::kOutOfRange, "max_elements"));
  EXPECT_TRUE(HasCode(edit([](pb::TensorPayload* p) { p->set_element_count(13); }),
                      StatusCode::kInvalidArgument, "element_count is 13"));
  EXPECT_TRUE(HasCode(edit([](pb::TensorPayload* p) { p->set_dtype(pb::DType(7)); }),
                      StatusCode::kInvalidArgument, "dtype 7"));
  EXPECT_TRUE(HasCode(edit([](pb::TensorPayload* p) { p->clear_codec(); }),
                      StatusCode::kInvalidArgument, "codec is empty"));
}

TEST(WireHostile, FloatPayloadOfOddLengthIsInvalidArgument) {
  Message m = FitResultMessage(Values(4, 23));
  auto& r = std::get<FitResult>(m.body);
  r.update.bytes.resize(10);
  r.bytes_after_codec = 10;
  EXPECT_TRUE(
      HasCode(Encode(m).status(), StatusCode::kInvalidArgument, "not a whole number of float32"));
  r.update.bytes.resize(12);
  r.bytes_after_codec = 12;
  EXPECT_TRUE(HasCode(Encode(m).status(), StatusCode::kInvalidArgument,
                      "12 bytes (3 float32 values) but element_count is 4"));
}

TEST(WireHostile, ChunkingInconsistentWithDeclaredSizeIsRejected) {
  WireLimits l;
  l.max_chunk_bytes = 100;
  const auto frames = MustEncode(FitResultMessage(Values(100, 24)), l);  // 400 B, 4 chunks
  auto edit = [&](const std::function<void(pb::TensorPayload*)>& fn, const WireLimits& rl) {
    std::vector<Frame> f = frames;
    f[0] = Rewrite(f[0], [&](pb::Envelope& e) { fn(e.mutable_fit_result()->mutable_update()); });
    return Decode(f, rl).status();
  };
  EXPECT_TRUE(HasCode(edit([](pb::TensorPayload* p) { p->set_chunk_count(3); }, l),
                      StatusCode::kCorruption,
                      "declares 3 chunks, but 400 bytes in chunks of "
                      "100 bytes take 4"));
  EXPECT_TRUE(HasCode(edit([](pb::TensorPayload* p) { p->set_chunk_bytes(0); }, l),
                      StatusCode::kCorruption, "chunks of 0 bytes"));
  WireLimits small = l;
  small.max_chunk_bytes = 64;
  EXPECT_TRUE(
      HasCode(edit([](pb::TensorPayload*) {}, small), StatusCode::kOutOfRange, "max_chunk_bytes"));
  WireLimits few = l;
  few.max_chunks = 3;
  EXPECT_TRUE(HasCode(edit([](pb::TensorPayload*) {}, few), StatusCode::kOutOfRange, "max_chunks"));
  EXPECT_TRUE(HasCode(Encode(FitResultMessage(Values(100, 24)), few).status(),
                      StatusCode::kOutOfRange, "max_chunks"));
  // A chunk that disagrees with the declared count.
  std::vector<Frame> f = frames;
  f[1] = Rewrite(f[1], [](pb::Envelope& e) { e.mutable_chunk()->set_count(5); });
  EXPECT_TRUE(HasCode(Decode(f, l).status(), StatusCode::kCorruption,
                      "says 5 chunks; the message declares 4"));
}

TEST(WireHostile, TypeAndBodyMustAgree) {
  const auto frames = MustEncode(Message{TestHeader(), Heartbeat{3}});
  const Frame mismatch = Rewrite(
      frames[0], [](pb::Envelope& e) { e.mutable_header()->set_type(pb::MESSAGE_TYPE_FIT_TASK); });
  EXPECT_TRUE(HasCode(Decode(std::vector<Frame>{mismatch}).status(), StatusCode::kCorruption,
                      "says type FitTask but carries a Heartbeat body"));
  const Frame unknown = Rewrite(frames[0], [](pb::Envelope& e) {
    e.mutable_header()->set_type(pb::MessageType(99));
    e.clear_heartbeat();
  });
  EXPECT_TRUE(HasCode(Decode(std::vector<Frame>{unknown}).status(), StatusCode::kInvalidArgument,
                      "message type 99"));
}

TEST(WireHostile, MeaninglessFieldValuesAreInvalidArgument) {
  auto task_with = [](const std::function<void(FitTask&)>& edit) {
    Message m = FitTaskMessage(Values(8, 25));
    edit(std::get<FitTask>(m.body));
    return Encode(m).status();
  };
  EXPECT_TRUE(HasCode(task_with([](FitTask& t) { t.round = 6; }), StatusCode::kInvalidArgument,
                      "FitTask round 6 differs from header round 5"));
  EXPECT_TRUE(HasCode(task_with([](FitTask& t) { t.learning_rate = std::nan(""); }),
                      StatusCode::kInvalidArgument, "learning_rate"));
  EXPECT_TRUE(HasCode(task_with([](FitTask& t) { t.momentum = 1.0; }), StatusCode::kInvalidArgument,
                      "momentum"));
  EXPECT_TRUE(HasCode(task_with([](FitTask& t) { t.local_epochs = 0; }),
                      StatusCode::kInvalidArgument, "local_epochs"));
  EXPECT_TRUE(HasCode(task_with([](FitTask& t) { t.prox_mu = -1; }), StatusCode::kInvalidArgument,
                      "prox_mu"));
  Message r = FitResultMessage(Values(8, 26));
  std::get<FitResult>(r.body).bytes_after_codec = 31;
  EXPECT_TRUE(HasCode(Encode(r).status(), StatusCode::kInvalidArgument,
                      "bytes_after_codec is 31 but the update has 32 bytes"));
  // Receiver side: a round mismatch written by an unchecked sender.
  const auto frames = MustEncode(FitTaskMessage(Values(8, 25)));
  std::vector<Frame> f = frames;
  f[0] = Rewrite(f[0], [](pb::Envelope& e) { e.mutable_fit_task()->set_round(4); });
  EXPECT_TRUE(HasCode(Decode(f).status(), StatusCode::kInvalidArgument,
                      "FitTask round 4 differs from header round 5"));
  Message rej{TestHeader(), Reject{RejectReason::kMalformed, "bad[31m", 1}};
  EXPECT_TRUE(HasCode(Encode(rej).status(), StatusCode::kInvalidArgument, "control byte 0x1b"));
}

}  // namespace
}  // namespace fedmesh::wire
