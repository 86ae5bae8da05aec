// Wire codec, secure aggregation messages: each of the seven survives Encode -> Decode field
// by field (the masked input in several chunk frames, through a Reassembler), FitTask
// carries the secure aggregation settings and still reads the bytes of a FitTask written
// before they existed, and every limit (list counts, exact byte lengths, x-coordinates,
// secret kinds, ids, federation / round / sender agreeing with the header, the masked
// payload's encoding) is refused with a Status naming the field, on the sending side and,
// for frames edited through the generated types (which this test, as the conversion
// code's own, may include), on the receiving side.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/wire/fedmesh.pb.h"
#include "core/wire/wire_codec.h"
#include "tests/core/status_assertions.h"

namespace fedmesh::wire {
namespace {

using fedmesh::testing::HasCode;

constexpr char kFederation[] = "fed-secagg";
constexpr uint64_t kRound = 7;

Header From(std::string sender, uint64_t message_id = 11) {
  Header h;
  h.federation_id = kFederation;
  h.sender_id = std::move(sender);
  h.round = kRound;
  h.model_version = 3;
  h.message_id = message_id;
  return h;
}

template <size_t N>
std::array<uint8_t, N> Bytes(uint8_t start) {
  std::array<uint8_t, N> a{};
  for (size_t i = 0; i < N; ++i) a[i] = static_cast<uint8_t>(start + 3 * i);
  return a;
}

std::vector<uint8_t> ByteVector(size_t n, uint8_t start) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(start + 7 * i);
  return v;
}

SecAggAdvertiseKeys Advertise(const std::string& client) {
  SecAggAdvertiseKeys m;
  m.federation_id = kFederation;
  m.round = kRound;
  m.client_id = client;
  m.channel_public_key = Bytes<kSecAggKeyBytes>(1);
  m.masking_public_key = Bytes<kSecAggKeyBytes>(101);
  m.signature = Bytes<kSecAggSignatureBytes>(201);
  return m;
}

SecAggRosterMember Member(int i) {
  return {"site-" + std::to_string(i), Bytes<kSecAggKeyBytes>(static_cast<uint8_t>(i)),
          Bytes<kSecAggKeyBytes>(static_cast<uint8_t>(50 + i)),
          Bytes<kSecAggSignatureBytes>(static_cast<uint8_t>(90 + i))};
}

SecAggRoster Roster(int members) {
  SecAggRoster m;
  m.federation_id = kFederation;
  m.round = kRound;
  for (int i = 0; i < members; ++i) m.members.push_back(Member(i));
  m.graph_seed = Bytes<kSecAggGraphSeedBytes>(77);
  return m;
}

SecAggSealedShares Box(const std::string& from, const std::string& to, uint8_t start) {
  return {from, to, ByteVector(kSecAggShareBoxBytes, start)};
}

SecAggShareKeys ShareKeys(const std::string& client, size_t boxes) {
  SecAggShareKeys m;
  m.federation_id = kFederation;
  m.round = kRound;
  m.client_id = client;
  for (size_t i = 0; i < boxes; ++i) {
    m.boxes.push_back(Box(client, "site-" + std::to_string(i + 10), static_cast<uint8_t>(i)));
  }
  return m;
}

SecAggForwardedShares Forwarded(const std::string& recipient, size_t boxes) {
  SecAggForwardedShares m;
  m.federation_id = kFederation;
  m.round = kRound;
  m.recipient = recipient;
  for (size_t i = 0; i < boxes; ++i) {
    m.boxes.push_back(Box("site-" + std::to_string(i + 10), recipient, static_cast<uint8_t>(i)));
  }
  return m;
}

SecAggMaskedInput Masked(const std::string& client, std::vector<uint32_t> words) {
  return {kFederation, kRound, client, Uint32Payload(words), {}};
}

SecAggUnmaskRequest Request(size_t survivors, size_t dropped) {
  SecAggUnmaskRequest m;
  m.federation_id = kFederation;
  m.round = kRound;
  for (size_t i = 0; i < survivors; ++i) m.survivors.push_back("site-" + std::to_string(i));
  for (size_t i = 0; i < dropped; ++i) m.dropped.push_back("gone-" + std::to_string(i));
  return m;
}

SecAggUnmaskShares Shares(const std::string& client, size_t shares) {
  SecAggUnmaskShares m;
  m.federation_id = kFederation;
  m.round = kRound;
  m.client_id = client;
  for (size_t i = 0; i < shares; ++i) {
    m.shares.push_back({"site-" + std::to_string(i + 10),
                        i % 2 ? SecAggSecretKind::kMaskingKey : SecAggSecretKind::kSelfMaskSeed,
                        static_cast<uint8_t>(i % 255 + 1),
                        ByteVector(kSecAggShareBytes, static_cast<uint8_t>(i))});
  }
  return m;
}

FitTask Task() {
  FitTask t;
  t.round = kRound;
  t.global_model = FloatPayload(std::vector<float>{0.5f, -1.5f, 2.0f});
  t.local_epochs = 2;
  t.batch_size = 16;
  t.learning_rate = 0.1;
  return t;
}

SecAggParameters Parameters() {
  SecAggParameters p;
  p.threshold = 5;
  p.neighbours = 8;
  p.clip = 2.5;
  p.bits = 20;
  p.min_clients = 4;
  p.max_clients = 600;
  return p;
}

std::vector<Frame> MustEncode(const Message& m, const WireLimits& l = {}) {
  auto frames = Encode(m, l);
  EXPECT_TRUE(frames.ok()) << frames.status().ToString();
  return frames.ok() ? *frames : std::vector<Frame>{};
}

Status EncodeStatus(const Header& h, const Body& body, const WireLimits& l = {}) {
  return Encode(Message{h, body}, l).status();
}

// Decodes the header frame of `m` after `edit` rewrote it through the generated types, as
// a sender that does not validate could have written it.
Status DecodeEdited(const Message& m, const std::function<void(pb::Envelope&)>& edit,
                    const WireLimits& l = {}) {
  std::vector<Frame> frames = MustEncode(m);
  if (frames.empty()) return Status::Internal("the unedited message did not encode");
  pb::Envelope env;
  EXPECT_TRUE(env.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size())));
  edit(env);
  const std::string s = env.SerializeAsString();
  frames[0].assign(s.begin(), s.end());
  return Decode(frames, l).status();
}

// Encode -> Decode of a message without payload: exactly one frame, and the same message.
template <typename T>
T RoundTrip(const Header& h, const T& body, MessageType type) {
  const Message m{h, body};
  auto frames = MustEncode(m);
  EXPECT_EQ(frames.size(), 1u);
  auto got = Decode(frames);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  if (!got.ok()) return T{};
  EXPECT_EQ(TypeOf(got->body), type);
  EXPECT_TRUE(got->header == h);
  EXPECT_TRUE(std::holds_alternative<T>(got->body));
  return std::holds_alternative<T>(got->body) ? std::get<T>(got->body) : T{};
}

// ---------------------------------------------------------------------------------------
// Round trips

TEST(WireSecAgg, AdvertiseKeysRoundTripsFieldByField) {
  const SecAggAdvertiseKeys sent = Advertise("site-1");
  const SecAggAdvertiseKeys got =
      RoundTrip(From("site-1"), sent, MessageType::kSecAggAdvertiseKeys);
  EXPECT_EQ(got.federation_id, kFederation);
  EXPECT_EQ(got.round, kRound);
  EXPECT_EQ(got.client_id, "site-1");
  EXPECT_EQ(got.channel_public_key, Bytes<32>(1));
  EXPECT_EQ(got.masking_public_key, Bytes<32>(101));
  EXPECT_EQ(got.signature, Bytes<64>(201));
  EXPECT_TRUE(got == sent);
}

TEST(WireSecAgg, RosterRoundTripsFieldByField) {
  const SecAggRoster sent = Roster(5);
  const SecAggRoster got = RoundTrip(From("aggregator"), sent, MessageType::kSecAggRoster);
  ASSERT_EQ(got.members.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(got.members[i].client_id, "site-" + std::to_string(i));
    EXPECT_EQ(got.members[i].channel_public_key, Bytes<32>(static_cast<uint8_t>(i)));
    EXPECT_EQ(got.members[i].masking_public_key, Bytes<32>(static_cast<uint8_t>(50 + i)));
    EXPECT_EQ(got.members[i].signature, Bytes<64>(static_cast<uint8_t>(90 + i)));
  }
  EXPECT_EQ(got.graph_seed, Bytes<32>(77));
  EXPECT_TRUE(got == sent);
}

TEST(WireSecAgg, ShareKeysRoundTripsFieldByField) {
  const SecAggShareKeys sent = ShareKeys("site-1", 6);
  const SecAggShareKeys got = RoundTrip(From("site-1"), sent, MessageType::kSecAggShareKeys);
  ASSERT_EQ(got.boxes.size(), 6u);
  EXPECT_EQ(got.boxes[3].sender, "site-1");
  EXPECT_EQ(got.boxes[3].recipient, "site-13");
  EXPECT_EQ(got.boxes[3].box, ByteVector(kSecAggShareBoxBytes, 3));
  EXPECT_TRUE(got == sent);
}

TEST(WireSecAgg, ForwardedSharesRoundTripsFieldByField) {
  const SecAggForwardedShares sent = Forwarded("site-2", 4);
  const SecAggForwardedShares got =
      RoundTrip(From("aggregator"), sent, MessageType::kSecAggForwardedShares);
  EXPECT_EQ(got.recipient, "site-2");
  ASSERT_EQ(got.boxes.size(), 4u);
  EXPECT_EQ(got.boxes[0].sender, "site-10");
  EXPECT_EQ(got.boxes[0].recipient, "site-2");
  EXPECT_EQ(got.boxes[0].box, ByteVector(kSecAggShareBoxBytes, 0));
  EXPECT_TRUE(got == sent);
}

TEST(WireSecAgg, UnmaskRequestRoundTripsFieldByField) {
  const SecAggUnmaskRequest sent = Request(4, 2);
  const SecAggUnmaskRequest got =
      RoundTrip(From("aggregator"), sent, MessageType::kSecAggUnmaskRequest);
  EXPECT_EQ(got.survivors, (std::vector<std::string>{"site-0", "site-1", "site-2", "site-3"}));
  EXPECT_EQ(got.dropped, (std::vector<std::string>{"gone-0", "gone-1"}));
  EXPECT_TRUE(got == sent);
}

TEST(WireSecAgg, UnmaskSharesRoundTripsFieldByField) {
  SecAggUnmaskShares sent = Shares("site-4", 3);
  sent.shares[2].x = 255;  // the largest x-coordinate
  const SecAggUnmaskShares got = RoundTrip(From("site-4"), sent, MessageType::kSecAggUnmaskShares);
  ASSERT_EQ(got.shares.size(), 3u);
  EXPECT_EQ(got.shares[0].owner, "site-10");
  EXPECT_EQ(got.shares[0].kind, SecAggSecretKind::kSelfMaskSeed);
  EXPECT_EQ(got.shares[0].x, 1u);
  EXPECT_EQ(got.shares[1].kind, SecAggSecretKind::kMaskingKey);
  EXPECT_EQ(got.shares[2].x, 255u);
  EXPECT_EQ(got.shares[1].y, ByteVector(kSecAggShareBytes, 1));
  EXPECT_TRUE(got == sent);
}

// The masked input is the one secagg message as large as the model: its words travel in
// chunk frames, bit-exactly, including patterns that would be NaN as float32.
TEST(WireSecAgg, MaskedInputCrossesInChunksBitExactly) {
  std::vector<uint32_t> words(50000);
  for (size_t i = 0; i < words.size(); ++i) words[i] = static_cast<uint32_t>(i * 2654435761u);
  words[0] = 0;
  words[1] = 0xFFFFFFFFu;
  words[2] = 0x7FC00000u;  // a float32 NaN: no finite-value check on uint32 words
  WireLimits l;
  l.max_chunk_bytes = 64 * 1024;
  const Message m{From("site-3"), Masked("site-3", words)};
  auto frames = MustEncode(m, l);
  ASSERT_EQ(frames.size(), 1u + 4u);  // 200,000 bytes in 64 KiB chunks
  Reassembler r(l);
  std::optional<Message> got;
  for (size_t i = 0; i < frames.size(); ++i) {
    auto added = r.Add(frames[i]);
    ASSERT_TRUE(added.ok()) << "frame " << i << ": " << added.status().ToString();
    ASSERT_EQ(added->has_value(), i + 1 == frames.size());
    if (added->has_value()) got = std::move(**added);
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(TypeOf(got->body), MessageType::kSecAggMaskedInput);
  const auto& mi = std::get<SecAggMaskedInput>(got->body);
  EXPECT_EQ(mi.client_id, "site-3");
  EXPECT_EQ(mi.masked.dtype, DType::kUint32);
  EXPECT_EQ(mi.masked.codec, "none");
  EXPECT_EQ(mi.masked.element_count, words.size());
  ASSERT_TRUE(mi.masked.digest.has_value());
  EXPECT_EQ(*mi.masked.digest, HashPayload(DigestKind::kBlake3, std::get<SecAggMaskedInput>(m.body).masked.bytes));
  EXPECT_EQ(PayloadUint32s(mi.masked).value(), words);
}

TEST(WireSecAgg, Uint32PayloadIsLittleEndian) {
  const std::vector<uint32_t> w = {1u, 0xA1B2C3D4u};
  const TensorPayload p = Uint32Payload(w);
  EXPECT_EQ(p.dtype, DType::kUint32);
  EXPECT_EQ(p.element_count, 2u);
  EXPECT_EQ(p.bytes, (std::vector<uint8_t>{1, 0, 0, 0, 0xD4, 0xC3, 0xB2, 0xA1}));
  EXPECT_EQ(PayloadUint32s(p).value(), w);
  TensorPayload bad = p;
  bad.bytes.pop_back();
  EXPECT_TRUE(HasCode(PayloadUint32s(bad).status(), StatusCode::kInvalidArgument, "7 bytes"));
  EXPECT_TRUE(HasCode(PayloadUint32s(FloatPayload(std::vector<float>{1.0f})).status(),
                      StatusCode::kInvalidArgument, "dtype 1"));
  bad = p;
  bad.codec = "zstd";
  EXPECT_TRUE(HasCode(PayloadUint32s(bad).status(), StatusCode::kFailedPrecondition, "zstd"));
  // And the float helper refuses uint32 words.
  EXPECT_TRUE(HasCode(PayloadFloats(p).status(), StatusCode::kInvalidArgument, "dtype 2"));
}

TEST(WireSecAgg, MessageTypesHaveTheirNumbersAndNames) {
  const std::pair<Body, std::pair<uint32_t, std::string_view>> cases[] = {
      {Advertise("a"), {10, "SecAggAdvertiseKeys"}},
      {Roster(1), {11, "SecAggRoster"}},
      {ShareKeys("a", 1), {12, "SecAggShareKeys"}},
      {Forwarded("a", 1), {13, "SecAggForwardedShares"}},
      {Masked("a", {1}), {14, "SecAggMaskedInput"}},
      {Request(1, 0), {15, "SecAggUnmaskRequest"}},
      {Shares("a", 1), {16, "SecAggUnmaskShares"}},
  };
  for (const auto& [body, expected] : cases) {
    EXPECT_EQ(static_cast<uint32_t>(TypeOf(body)), expected.first);
    EXPECT_EQ(MessageTypeName(TypeOf(body)), expected.second);
    // The header frame says the same type.
    const Header h = From("a");
    auto frames = MustEncode(Message{h, body});
    ASSERT_FALSE(frames.empty());
    pb::Envelope env;
    ASSERT_TRUE(env.ParseFromArray(frames[0].data(), static_cast<int>(frames[0].size())));
    EXPECT_EQ(static_cast<uint32_t>(env.header().type()), expected.first);
  }
}

// Cutting a header frame anywhere is detected, for the new bodies too.
TEST(WireSecAgg, TruncatedHeaderFramesAreCorruptionAtEveryLength) {
  const Message messages[] = {
      {From("site-1"), Advertise("site-1")},      {From("agg"), Roster(3)},
      {From("site-1"), ShareKeys("site-1", 2)},   {From("agg"), Forwarded("site-1", 2)},
      {From("site-1"), Masked("site-1", {1, 2})}, {From("agg"), Request(2, 1)},
      {From("site-1"), Shares("site-1", 2)},
  };
  for (const Message& m : messages) {
    const Frame header = MustEncode(m)[0];
    for (size_t len = 0; len < header.size(); ++len) {
      Reassembler r;
      ASSERT_TRUE(HasCode(r.Add(Frame(header.begin(), header.begin() + len)).status(),
                          StatusCode::kCorruption))
          << MessageTypeName(TypeOf(m.body)) << " cut to " << len << " of " << header.size();
    }
  }
}

// ---------------------------------------------------------------------------------------
// FitTask

TEST(WireSecAgg, FitTaskCarriesTheSecAggParameters) {
  FitTask t = Task();
  t.secagg = Parameters();
  const Message m{From("aggregator"), t};
  auto got = Decode(MustEncode(m));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const FitTask& r = std::get<FitTask>(got->body);
  ASSERT_TRUE(r.secagg.has_value());
  EXPECT_EQ(r.secagg->threshold, 5u);
  EXPECT_EQ(r.secagg->neighbours, 8u);
  EXPECT_EQ(r.secagg->clip, 2.5);
  EXPECT_EQ(r.secagg->bits, 20u);
  EXPECT_EQ(r.secagg->min_clients, 4u);
  EXPECT_EQ(r.secagg->max_clients, 600u);
  EXPECT_EQ(r.learning_rate, 0.1);
  // Defaults (threshold and neighbours 0) survive too: present but zero is not absent.
  t.secagg = SecAggParameters{};
  t.secagg->max_clients = 10;
  got = Decode(MustEncode(Message{From("aggregator"), t}));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_TRUE(std::get<FitTask>(got->body).secagg.has_value());
  EXPECT_TRUE(std::get<FitTask>(got->body).secagg == t.secagg);
}

// A FitTask header frame written by the schema before secure aggregation existed (commit
// ca6e2ca), made with `protoc --encode=fedmesh.wire.pb.Envelope` from that commit's
// core/wire/fedmesh.proto: header {federation "fed-hospitals", sender "aggregator", round
// 5, model_version 12, FIT_TASK, message_id 42}, fit_task {round 5, an empty "none" model,
// 3 epochs, batch 64, lr 0.05, momentum 0.9, prox_mu 0.01, deadline 1700000000123,
// update_codec "fp16"}.
const uint8_t kOldFitTaskFrame[] = {
    0x0a, 0x25, 0x08, 0x01, 0x12, 0x0d, 0x66, 0x65, 0x64, 0x2d, 0x68, 0x6f, 0x73, 0x70, 0x69,
    0x74, 0x61, 0x6c, 0x73, 0x1a, 0x0a, 0x61, 0x67, 0x67, 0x72, 0x65, 0x67, 0x61, 0x74, 0x6f,
    0x72, 0x20, 0x05, 0x28, 0x0c, 0x30, 0x03, 0x38, 0x2a, 0x62, 0x5a, 0x08, 0x05, 0x12, 0x2a,
    0x0a, 0x04, 0x6e, 0x6f, 0x6e, 0x65, 0x10, 0x01, 0x42, 0x20, 0xe3, 0xb0, 0xc4, 0x42, 0x98,
    0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4,
    0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55, 0x18, 0x03, 0x20,
    0x40, 0x29, 0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xa9, 0x3f, 0x31, 0xcd, 0xcc, 0xcc, 0xcc,
    0xcc, 0xcc, 0xec, 0x3f, 0x39, 0x7b, 0x14, 0xae, 0x47, 0xe1, 0x7a, 0x84, 0x3f, 0x40, 0xfb,
    0xd0, 0x95, 0xff, 0xbc, 0x31, 0x4a, 0x04, 0x66, 0x70, 0x31, 0x36};

TEST(WireSecAgg, OldFitTaskWithoutSecAggFieldsDecodesWithSecAggOff) {
  const Frame old(std::begin(kOldFitTaskFrame), std::end(kOldFitTaskFrame));
  auto got = Decode(std::vector<Frame>{old});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->header.federation_id, "fed-hospitals");
  EXPECT_EQ(got->header.message_id, 42u);
  ASSERT_EQ(TypeOf(got->body), MessageType::kFitTask);
  const FitTask& t = std::get<FitTask>(got->body);
  EXPECT_FALSE(t.secagg.has_value());
  EXPECT_EQ(t.round, 5u);
  EXPECT_EQ(t.local_epochs, 3u);
  EXPECT_EQ(t.batch_size, 64u);
  EXPECT_EQ(t.learning_rate, 0.05);
  EXPECT_EQ(t.momentum, 0.9);
  EXPECT_EQ(t.prox_mu, 0.01);
  EXPECT_EQ(t.deadline_unix_ms, 1700000000123u);
  EXPECT_EQ(t.update_codec, "fp16");
  EXPECT_EQ(t.global_model.element_count, 0u);
  // And a FitTask without secure aggregation is written exactly as before, so a receiver
  // built before this change reads it unchanged.
  auto again = Encode(*got);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0], old);
}

TEST(WireSecAgg, FitTaskSecAggParametersOutOfRangeAreRefused) {
  auto with = [](const std::function<void(SecAggParameters&)>& edit) {
    FitTask t = Task();
    t.secagg = Parameters();
    edit(*t.secagg);
    return EncodeStatus(From("aggregator"), t);
  };
  EXPECT_TRUE(with([](SecAggParameters&) {}).ok());
  const std::pair<std::function<void(SecAggParameters&)>, std::string_view> cases[] = {
      {[](SecAggParameters& p) { p.clip = 0; }, "secagg.clip is 0"},
      {[](SecAggParameters& p) { p.clip = std::numeric_limits<double>::infinity(); },
       "secagg.clip is inf"},
      {[](SecAggParameters& p) { p.bits = 1; }, "secagg.bits is 1"},
      {[](SecAggParameters& p) { p.bits = 33; }, "secagg.bits is 33"},
      {[](SecAggParameters& p) { p.neighbours = 7; }, "secagg.neighbours is 7"},
      {[](SecAggParameters& p) { p.neighbours = 256; }, "secagg.neighbours is 256"},
      {[](SecAggParameters& p) { p.threshold = 4; }, "secagg.threshold is 4; it must be more"},
      {[](SecAggParameters& p) { p.threshold = 9; }, "secagg.threshold is 9; it must be more"},
      {[](SecAggParameters& p) {
         p.neighbours = 0;
         p.threshold = 255;
       },
       "secagg.threshold is 255; it must be <= 254"},
      {[](SecAggParameters& p) { p.min_clients = 1; }, "secagg.min_clients is 1"},
      {[](SecAggParameters& p) { p.max_clients = 3; },
       "secagg.max_clients is 3; it must be >= min_clients (4)"},
  };
  for (const auto& [edit, needle] : cases) {
    EXPECT_TRUE(HasCode(with(edit), StatusCode::kInvalidArgument, needle));
  }
  // The receiver makes the same checks on what arrived.
  FitTask t = Task();
  t.secagg = Parameters();
  EXPECT_TRUE(HasCode(
      DecodeEdited(Message{From("aggregator"), t},
                   [](pb::Envelope& e) { e.mutable_fit_task()->mutable_secagg()->set_bits(40); }),
      StatusCode::kInvalidArgument, "secagg.bits is 40"));
  EXPECT_TRUE(HasCode(DecodeEdited(Message{From("aggregator"), Task()},
                                   [](pb::Envelope& e) {
                                     e.mutable_fit_task()->mutable_secagg();  // present, all 0
                                   }),
                      StatusCode::kInvalidArgument, "secagg.clip is 0"));
}

// ---------------------------------------------------------------------------------------
// Counts, before anything is copied

TEST(WireSecAgg, RosterOverMaxSecAggClientsIsOutOfRange) {
  WireLimits few;
  few.max_secagg_clients = 2;
  const Message m{From("aggregator"), Roster(3)};
  EXPECT_TRUE(HasCode(Encode(m, few).status(), StatusCode::kOutOfRange,
                      "SecAggRoster lists 3 members; the limit is 2 (max_secagg_clients)"));
  EXPECT_TRUE(HasCode(Decode(MustEncode(m), few).status(), StatusCode::kOutOfRange,
                      "SecAggRoster lists 3 members; the limit is 2"));
  few.max_secagg_clients = 3;
  EXPECT_TRUE(Decode(MustEncode(m), few).ok());
}

TEST(WireSecAgg, UnmaskRequestOverMaxSecAggClientsIsOutOfRange) {
  WireLimits few;
  few.max_secagg_clients = 4;
  const Message m{From("aggregator"), Request(3, 2)};
  EXPECT_TRUE(HasCode(Encode(m, few).status(), StatusCode::kOutOfRange,
                      "SecAggUnmaskRequest lists 5 clients (survivors and dropped); the limit is "
                      "4 (max_secagg_clients)"));
  EXPECT_TRUE(
      HasCode(Decode(MustEncode(m), few).status(), StatusCode::kOutOfRange, "lists 5 clients"));
  EXPECT_TRUE(Encode(Message{From("aggregator"), Request(2, 2)}, few).ok());
}

TEST(WireSecAgg, MoreBoxesThanNeighboursAreOutOfRange) {
  EXPECT_TRUE(EncodeStatus(From("site-1"), ShareKeys("site-1", kSecAggMaxNeighbours)).ok());
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-1"), ShareKeys("site-1", 255)),
                      StatusCode::kOutOfRange,
                      "SecAggShareKeys lists 255 boxes; the limit is 254"));
  EXPECT_TRUE(HasCode(EncodeStatus(From("aggregator"), Forwarded("site-1", 255)),
                      StatusCode::kOutOfRange,
                      "SecAggForwardedShares lists 255 boxes; the limit is 254"));
  // Receiver side: a sender that does not check adds a 255th box.
  EXPECT_TRUE(HasCode(DecodeEdited(Message{From("site-1"), ShareKeys("site-1", 254)},
                                   [](pb::Envelope& e) {
                                     auto* s = e.mutable_secagg_share_keys();
                                     *s->add_boxes() = s->boxes(0);
                                   }),
                      StatusCode::kOutOfRange, "SecAggShareKeys lists 255 boxes"));
  EXPECT_TRUE(HasCode(DecodeEdited(Message{From("aggregator"), Forwarded("site-1", 254)},
                                   [](pb::Envelope& e) {
                                     auto* s = e.mutable_secagg_forwarded_shares();
                                     *s->add_boxes() = s->boxes(0);
                                   }),
                      StatusCode::kOutOfRange, "SecAggForwardedShares lists 255 boxes"));
}

TEST(WireSecAgg, MoreSharesThanNeighboursAreOutOfRange) {
  EXPECT_TRUE(EncodeStatus(From("site-1"), Shares("site-1", 254)).ok());
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-1"), Shares("site-1", 255)), StatusCode::kOutOfRange,
                      "SecAggUnmaskShares lists 255 shares; the limit is 254"));
  EXPECT_TRUE(HasCode(DecodeEdited(Message{From("site-1"), Shares("site-1", 254)},
                                   [](pb::Envelope& e) {
                                     auto* s = e.mutable_secagg_unmask_shares();
                                     *s->add_shares() = s->shares(0);
                                   }),
                      StatusCode::kOutOfRange, "lists 255 shares"));
}

// ---------------------------------------------------------------------------------------
// Exact lengths (keys, signatures and seeds are arrays on this side, so only a receiver
// can see them wrong; boxes and shares are checked on both sides)

TEST(WireSecAgg, KeysSignaturesAndSeedsOfTheWrongLengthAreRefusedOnReceipt) {
  const Message ad{From("site-1"), Advertise("site-1")};
  EXPECT_TRUE(HasCode(DecodeEdited(ad,
                                   [](pb::Envelope& e) {
                                     e.mutable_secagg_advertise_keys()->set_channel_public_key(
                                         std::string(31, 'k'));
                                   }),
                      StatusCode::kInvalidArgument,
                      "SecAggAdvertiseKeys channel_public_key is 31 bytes; an X25519 public key "
                      "is 32 bytes"));
  EXPECT_TRUE(HasCode(DecodeEdited(ad,
                                   [](pb::Envelope& e) {
                                     e.mutable_secagg_advertise_keys()->set_masking_public_key(
                                         std::string(33, 'k'));
                                   }),
                      StatusCode::kInvalidArgument,
                      "SecAggAdvertiseKeys masking_public_key is 33 bytes"));
  EXPECT_TRUE(HasCode(
      DecodeEdited(ad,
                   [](pb::Envelope& e) { e.mutable_secagg_advertise_keys()->clear_signature(); }),
      StatusCode::kInvalidArgument,
      "SecAggAdvertiseKeys signature is 0 bytes; an Ed25519 signature is 64"));
  const Message roster{From("aggregator"), Roster(3)};
  EXPECT_TRUE(HasCode(DecodeEdited(roster,
                                   [](pb::Envelope& e) {
                                     e.mutable_secagg_roster()->mutable_members(2)->set_signature(
                                         std::string(65, 's'));
                                   }),
                      StatusCode::kInvalidArgument, "SecAggRoster member 2 signature is 65 bytes"));
  EXPECT_TRUE(HasCode(
      DecodeEdited(roster,
                   [](pb::Envelope& e) {
                     e.mutable_secagg_roster()->mutable_members(1)->set_channel_public_key("short");
                   }),
      StatusCode::kInvalidArgument, "SecAggRoster member 1 channel_public_key is 5 bytes"));
  EXPECT_TRUE(HasCode(
      DecodeEdited(
          roster,
          [](pb::Envelope& e) { e.mutable_secagg_roster()->set_graph_seed(std::string(16, 'g')); }),
      StatusCode::kInvalidArgument,
      "SecAggRoster graph_seed is 16 bytes; a graph seed is 32 bytes"));
}

TEST(WireSecAgg, BoxesOfTheWrongLengthAreRefused) {
  SecAggShareKeys sk = ShareKeys("site-1", 3);
  sk.boxes[1].box.push_back(0);
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-1"), sk), StatusCode::kInvalidArgument,
                      "SecAggShareKeys box 1 is 105 bytes; a sealed pair of shares is 104 bytes"));
  SecAggForwardedShares fs = Forwarded("site-1", 3);
  fs.boxes[2].box.clear();
  EXPECT_TRUE(HasCode(EncodeStatus(From("aggregator"), fs), StatusCode::kInvalidArgument,
                      "SecAggForwardedShares box 2 is 0 bytes"));
  EXPECT_TRUE(HasCode(
      DecodeEdited(Message{From("site-1"), ShareKeys("site-1", 3)},
                   [](pb::Envelope& e) {
                     e.mutable_secagg_share_keys()->mutable_boxes(0)->mutable_box()->pop_back();
                   }),
      StatusCode::kInvalidArgument, "SecAggShareKeys box 0 is 103 bytes"));
  EXPECT_TRUE(HasCode(
      DecodeEdited(Message{From("aggregator"), Forwarded("site-1", 3)},
                   [](pb::Envelope& e) {
                     e.mutable_secagg_forwarded_shares()->mutable_boxes(1)->mutable_box()->append(
                         1000, 'x');
                   }),
      StatusCode::kInvalidArgument, "SecAggForwardedShares box 1 is 1104 bytes"));
}

TEST(WireSecAgg, BadRevealedSharesAreRefused) {
  auto sending = [](const std::function<void(SecAggRevealedShare&)>& edit) {
    SecAggUnmaskShares m = Shares("site-1", 3);
    edit(m.shares[1]);
    return EncodeStatus(From("site-1"), m);
  };
  EXPECT_TRUE(HasCode(sending([](SecAggRevealedShare& s) { s.y.pop_back(); }),
                      StatusCode::kInvalidArgument,
                      "SecAggUnmaskShares share 1 y is 31 bytes; a share of a 32-byte secret is "
                      "32 bytes"));
  EXPECT_TRUE(HasCode(sending([](SecAggRevealedShare& s) { s.x = 0; }),
                      StatusCode::kInvalidArgument,
                      "SecAggUnmaskShares share 1 x is 0; Shamir x-coordinates are 1..255"));
  EXPECT_TRUE(
      HasCode(sending([](SecAggRevealedShare& s) { s.kind = static_cast<SecAggSecretKind>(0); }),
              StatusCode::kInvalidArgument, "SecAggUnmaskShares share 1 kind 0 is unknown"));
  EXPECT_TRUE(HasCode(sending([](SecAggRevealedShare& s) { s.owner = "two words"; }),
                      StatusCode::kInvalidArgument, "SecAggUnmaskShares share 1 owner has byte"));

  auto receiving = [](const std::function<void(pb::SecAggRevealedShare*)>& edit) {
    return DecodeEdited(Message{From("site-1"), Shares("site-1", 3)}, [&](pb::Envelope& e) {
      edit(e.mutable_secagg_unmask_shares()->mutable_shares(2));
    });
  };
  EXPECT_TRUE(HasCode(receiving([](pb::SecAggRevealedShare* s) { s->set_x(256); }),
                      StatusCode::kInvalidArgument,
                      "SecAggUnmaskShares share 2 x is 256; Shamir x-coordinates are 1..255"));
  EXPECT_TRUE(HasCode(receiving([](pb::SecAggRevealedShare* s) { s->set_x(0); }),
                      StatusCode::kInvalidArgument, "share 2 x is 0"));
  EXPECT_TRUE(
      HasCode(receiving([](pb::SecAggRevealedShare* s) { s->set_kind(pb::SecAggSecretKind(3)); }),
              StatusCode::kInvalidArgument, "share 2 kind 3 is unknown"));
  EXPECT_TRUE(HasCode(receiving([](pb::SecAggRevealedShare* s) {
                        s->set_kind(pb::SECAGG_SECRET_KIND_UNSPECIFIED);
                      }),
                      StatusCode::kInvalidArgument, "share 2 kind 0 is unknown"));
  EXPECT_TRUE(HasCode(receiving([](pb::SecAggRevealedShare* s) { s->mutable_y()->append("!"); }),
                      StatusCode::kInvalidArgument, "share 2 y is 33 bytes"));
}

// ---------------------------------------------------------------------------------------
// Federation, round, sender and ids

TEST(WireSecAgg, FederationRoundAndSenderMustMatchTheHeader) {
  SecAggAdvertiseKeys ad = Advertise("site-1");
  ad.federation_id = "fed-other";
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-1"), ad), StatusCode::kInvalidArgument,
                      "SecAggAdvertiseKeys federation_id differs from header federation_id "
                      "'fed-secagg'"));
  SecAggRoster roster = Roster(2);
  roster.round = 8;
  EXPECT_TRUE(HasCode(EncodeStatus(From("aggregator"), roster), StatusCode::kInvalidArgument,
                      "SecAggRoster round 8 differs from header round 7"));
  // A client's message names its sender; the frame's sender must be that client (the
  // transport authenticates the frame's sender, and nothing else in ShareKeys, MaskedInput
  // or UnmaskShares is signed).
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-2"), Advertise("site-1")),
                      StatusCode::kInvalidArgument,
                      "SecAggAdvertiseKeys client_id 'site-1' differs from header sender_id "
                      "'site-2'"));
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-2"), ShareKeys("site-1", 1)),
                      StatusCode::kInvalidArgument, "SecAggShareKeys client_id 'site-1' differs"));
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-2"), Masked("site-1", {1})),
                      StatusCode::kInvalidArgument,
                      "SecAggMaskedInput client_id 'site-1' differs"));
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-2"), Shares("site-1", 1)),
                      StatusCode::kInvalidArgument,
                      "SecAggUnmaskShares client_id 'site-1' differs"));
  SecAggUnmaskShares unnamed = Shares("site-1", 1);
  unnamed.client_id.clear();
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-1"), unnamed), StatusCode::kInvalidArgument,
                      "SecAggUnmaskShares client_id is empty"));
  // Receiver side: a body that disagrees with its header.
  EXPECT_TRUE(HasCode(DecodeEdited(Message{From("site-1"), Masked("site-1", {1, 2})},
                                   [](pb::Envelope& e) {
                                     e.mutable_secagg_masked_input()->set_client_id("site-9");
                                   }),
                      StatusCode::kInvalidArgument,
                      "SecAggMaskedInput client_id 'site-9' differs from header sender_id "
                      "'site-1'"));
  EXPECT_TRUE(HasCode(
      DecodeEdited(Message{From("aggregator"), Request(2, 1)},
                   [](pb::Envelope& e) { e.mutable_secagg_unmask_request()->set_round(6); }),
      StatusCode::kInvalidArgument, "SecAggUnmaskRequest round 6 differs from header round 7"));
  EXPECT_TRUE(HasCode(DecodeEdited(Message{From("aggregator"), Forwarded("site-1", 1)},
                                   [](pb::Envelope& e) {
                                     e.mutable_secagg_forwarded_shares()->set_federation_id("x");
                                   }),
                      StatusCode::kInvalidArgument, "SecAggForwardedShares federation_id differs"));
}

TEST(WireSecAgg, BoxesMustBelongToTheirMessage) {
  SecAggShareKeys sk = ShareKeys("site-1", 3);
  sk.boxes[2].sender = "site-5";
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-1"), sk), StatusCode::kInvalidArgument,
                      "SecAggShareKeys box 2 sender 'site-5' differs from client_id 'site-1'"));
  SecAggForwardedShares fs = Forwarded("site-1", 3);
  fs.boxes[0].recipient = "site-5";
  EXPECT_TRUE(HasCode(EncodeStatus(From("aggregator"), fs), StatusCode::kInvalidArgument,
                      "SecAggForwardedShares box 0 recipient 'site-5' differs from the "
                      "message's recipient 'site-1'"));
  fs = Forwarded("site-1", 3);
  fs.boxes[1].sender.clear();
  EXPECT_TRUE(HasCode(EncodeStatus(From("aggregator"), fs), StatusCode::kInvalidArgument,
                      "SecAggForwardedShares box 1 sender is empty"));
  EXPECT_TRUE(HasCode(
      DecodeEdited(Message{From("site-1"), ShareKeys("site-1", 2)},
                   [](pb::Envelope& e) {
                     e.mutable_secagg_share_keys()->mutable_boxes(1)->set_recipient("bad\nid");
                   }),
      StatusCode::kInvalidArgument, "SecAggShareKeys box 1 recipient has byte 0x0a at offset 3"));
}

TEST(WireSecAgg, IdsFollowTheIdRules) {
  SecAggUnmaskRequest r = Request(2, 2);
  r.dropped[1] = "with space";
  EXPECT_TRUE(HasCode(EncodeStatus(From("aggregator"), r), StatusCode::kInvalidArgument,
                      "SecAggUnmaskRequest dropped 1 has byte 0x20"));
  r = Request(2, 0);
  r.survivors[0].clear();
  EXPECT_TRUE(HasCode(EncodeStatus(From("aggregator"), r), StatusCode::kInvalidArgument,
                      "SecAggUnmaskRequest survivor 0 is empty"));
  SecAggRoster roster = Roster(3);
  roster.members[2].client_id = std::string(300, 'a');
  EXPECT_TRUE(HasCode(EncodeStatus(From("aggregator"), roster), StatusCode::kOutOfRange,
                      "SecAggRoster member 2 client_id is 300 bytes; the limit is 256"));
  SecAggForwardedShares fs = Forwarded("site-1", 1);
  fs.recipient = "";
  EXPECT_TRUE(HasCode(EncodeStatus(From("aggregator"), fs), StatusCode::kInvalidArgument,
                      "SecAggForwardedShares recipient is empty"));
}

// ---------------------------------------------------------------------------------------
// The masked payload's encoding

TEST(WireSecAgg, MaskedInputMustBeUncodedUint32) {
  SecAggMaskedInput m = Masked("site-1", {1, 2, 3});
  m.masked.codec = "zstd";
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-1"), m), StatusCode::kInvalidArgument,
                      "SecAggMaskedInput.masked codec must be \"none\""));
  m = Masked("site-1", {1, 2, 3});
  m.masked.dtype = DType::kFloat32;
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-1"), m), StatusCode::kInvalidArgument,
                      "SecAggMaskedInput.masked has dtype 1; it must be uint32 (2)"));
  m = Masked("site-1", {1, 2, 3});
  m.masked.bytes.resize(10);
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-1"), m), StatusCode::kInvalidArgument,
                      "10 bytes, which is not a whole number of uint32 values"));
  m = Masked("site-1", {1, 2, 3});
  m.masked.element_count = 4;
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-1"), m), StatusCode::kInvalidArgument,
                      "12 bytes (3 uint32 values) but element_count is 4"));
  // Receiver side, and the other way round: float payloads refuse uint32 words.
  EXPECT_TRUE(HasCode(DecodeEdited(Message{From("site-1"), Masked("site-1", {1, 2})},
                                   [](pb::Envelope& e) {
                                     e.mutable_secagg_masked_input()->mutable_masked()->set_dtype(
                                         pb::DTYPE_FLOAT32);
                                   }),
                      StatusCode::kInvalidArgument, "has dtype 1; it must be uint32 (2)"));
  FitResult fr;
  fr.round = kRound;
  fr.update = Uint32Payload(std::vector<uint32_t>{1, 2});
  fr.bytes_after_codec = 8;
  EXPECT_TRUE(HasCode(EncodeStatus(From("site-1"), fr), StatusCode::kInvalidArgument,
                      "FitResult.update has dtype 2; it must be float32 (1)"));
}

}  // namespace
}  // namespace fedmesh::wire
