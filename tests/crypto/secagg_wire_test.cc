// Secure aggregation over the wire (crypto/secagg/secagg_wire.h):
//  - A whole round (n = 20, drops before ShareKeys, before the masked input and before
//    unmasking) in which every message, both ways, goes ToWire -> wire::Encode -> frames ->
//    a wire::Reassembler (the server's takes the masked inputs' chunk frames interleaved
//    across clients) -> FromWire, with the options every party uses taken from a FitTask
//    that crossed the wire too. The sum equals the plain Z_2^32 sum of the contributors'
//    encodings, word for word, and is identical to the same round run in process.
//  - Every conversion keeps every field, both ways.
//  - FromWire refuses each malformed field (box and share lengths, x = 0, unknown secret
//    kinds, the masked payload's codec, dtype and length, FitTask settings no client
//    accepts), and ToWire's output for a bad SecretKind is refused by wire::Encode.
//  - The wire layer's FitTask checks never accept settings SecAggOptions::Validate refuses,
//    and refuse valid ones only where documented.
//  - A box damaged in transit is caught by the client (Corruption), which keeps its state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/wire/wire_codec.h"
#include "crypto/secagg/secagg_wire.h"
#include "crypto/sodium.h"
#include "tests/crypto/secagg_round_harness.h"
#include "tests/crypto/secagg_test_util.h"

namespace fedmesh {
namespace {

using secagg_test::Must;
using secagg_test::SecAggRound;
using secagg_test::SiteId;
using ::testing::HasSubstr;

constexpr char kAggregator[] = "aggregator";

// Carries wire bodies as frames. Every frame is counted; a sender's message ids increase.
class WireLink {
 public:
  explicit WireLink(const SecAggOptions& options) : options_(options) {
    limits_.max_chunk_bytes = 4096;  // masked inputs of 3,000 words take 3 chunks
  }
  const wire::WireLimits& limits() const { return limits_; }

  wire::Header HeaderFrom(const std::string& sender) {
    wire::Header h;
    h.federation_id = options_.federation_id;
    h.sender_id = sender;
    h.round = options_.round;
    h.message_id = ++message_ids_[sender];
    return h;
  }

  std::vector<wire::Frame> Encode(const std::string& sender, wire::Body body) {
    Result<std::vector<wire::Frame>> frames =
        wire::Encode(wire::Message{HeaderFrom(sender), std::move(body)}, limits_);
    EXPECT_TRUE(frames.ok()) << sender << ": " << frames.status().ToString();
    if (!frames.ok()) return {};
    for (const wire::Frame& f : *frames) bytes_ += f.size();
    frame_count_ += frames->size();
    return std::move(frames).value();
  }

  // One message's frames, as a receiver gets them.
  template <typename T>
  T Receive(const std::vector<wire::Frame>& frames) {
    Result<wire::Message> m = wire::Decode(frames, limits_);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (!m.ok() || !std::holds_alternative<T>(m->body)) {
      ADD_FAILURE() << "expected a " << typeid(T).name();
      return T{};
    }
    return std::get<T>(std::move(m->body));
  }

  size_t bytes() const { return bytes_; }
  size_t frame_count() const { return frame_count_; }

 private:
  SecAggOptions options_;
  wire::WireLimits limits_;
  std::map<std::string, uint64_t> message_ids_;
  size_t bytes_ = 0;
  size_t frame_count_ = 0;
};

// The options a node gets for `server_options`: the aggregator puts them in a FitTask over
// a model of vector_size values, the FitTask crosses the wire, the node reads them back.
SecAggOptions OptionsThroughFitTask(const SecAggOptions& server_options, size_t allowlist_size) {
  wire::FitTask task;
  task.round = server_options.round;
  task.global_model = wire::FloatPayload(std::vector<float>(server_options.vector_size, 0.25f));
  task.secagg = ToWire(server_options, allowlist_size);
  WireLink link(server_options);
  Result<wire::Message> got = wire::Decode(link.Encode(kAggregator, task), link.limits());
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  if (!got.ok()) return {};
  return Must(FromWire(got->header, std::get<wire::FitTask>(got->body)));
}

class SecAggWireTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(InitSodium().ok()); }
};

TEST_F(SecAggWireTest, WholeRoundOverTheWireIsExact) {
  constexpr size_t kN = 20;
  constexpr uint64_t kSeed = 4242;
  SecAggOptions server_options;
  server_options.federation_id = "fed-wire";
  server_options.round = 31;
  server_options.vector_size = 3000;
  server_options.neighbours = 14;  // t = 8: every needed secret keeps >= 9 of 14 holders
  server_options.clip = 2.0;
  server_options.bits = 18;
  server_options.min_clients = 5;

  // The nodes' options came through a FitTask; they are the server's, max_clients
  // resolved to the allowlist's size.
  const SecAggOptions options = OptionsThroughFitTask(server_options, kN);
  EXPECT_EQ(options.federation_id, "fed-wire");
  EXPECT_EQ(options.round, 31u);
  EXPECT_EQ(options.vector_size, 3000u);
  EXPECT_EQ(options.neighbours, 14u);
  EXPECT_EQ(options.threshold, 0u);
  EXPECT_EQ(options.clip, 2.0);
  EXPECT_EQ(options.bits, 18u);
  EXPECT_EQ(options.min_clients, 5u);
  EXPECT_EQ(options.max_clients, kN);

  SecAggRound round(kN, options, kSeed);
  SecAggRound::Drops drops;
  drops.before_share_keys = {8};
  drops.before_masked_input = {3, 11};  // they shared keys: their masking keys are rebuilt
  drops.before_unmask = {5, 17};        // they sent inputs: their self-mask seeds are rebuilt
  WireLink link(options);
  wire::Reassembler at_server(link.limits());

  // Feeds the server's Reassembler one frame; returns the completed message, if any.
  auto server_takes = [&](const wire::Frame& frame) -> std::optional<wire::Message> {
    Result<std::optional<wire::Message>> added = at_server.Add(frame);
    EXPECT_TRUE(added.ok()) << added.status().ToString();
    return added.ok() ? *added : std::nullopt;
  };
  auto deliver = [&](const std::vector<wire::Frame>& frames,
                     const std::function<Status(const wire::Message&)>& handle) {
    for (const wire::Frame& f : frames) {
      if (std::optional<wire::Message> m = server_takes(f)) {
        const Status s = handle(*m);
        EXPECT_TRUE(s.ok()) << m->header.sender_id << ": " << s.ToString();
      }
    }
  };

  // Stage 0: AdvertiseKeys.
  for (size_t i = 0; i < kN; ++i) {
    deliver(link.Encode(SiteId(i), ToWire(round.client(i).advertisement())),
            [&](const wire::Message& m) -> Status {
              FM_ASSIGN_OR_RETURN(AdvertiseKeys a,
                                  FromWire(std::get<wire::SecAggAdvertiseKeys>(m.body)));
              return round.server().OnAdvertise(a);
            });
  }
  Result<SecAggOutbox> out = round.server().CloseStage();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->recipients.size(), kN);

  // Stage 1: the roster out (encoded once, decoded by every member), ShareKeys back.
  const std::vector<wire::Frame> roster_frames = link.Encode(kAggregator, ToWire(*out->roster));
  std::set<size_t> gone = drops.before_share_keys;
  for (const std::string& id : out->recipients) {
    const size_t i = SecAggRound::IndexOf(id);
    const Roster roster = Must(FromWire(link.Receive<wire::SecAggRoster>(roster_frames)));
    ASSERT_EQ(roster.members.size(), kN);
    if (gone.contains(i)) continue;
    Result<ShareKeys> reply = round.client(i).OnRoster(roster);
    ASSERT_TRUE(reply.ok()) << id << ": " << reply.status().ToString();
    deliver(link.Encode(id, ToWire(*reply)), [&](const wire::Message& m) -> Status {
      FM_ASSIGN_OR_RETURN(ShareKeys s, FromWire(std::get<wire::SecAggShareKeys>(m.body)));
      return round.server().OnShares(s);
    });
  }
  ASSERT_TRUE((out = round.server().CloseStage()).ok()) << out.status().ToString();
  ASSERT_EQ(out->forwarded_shares.size(), kN - 1);

  // Stage 2: each client's forwarded boxes out; the masked inputs back, their chunk
  // frames interleaved across clients into the one server Reassembler.
  gone.insert(drops.before_masked_input.begin(), drops.before_masked_input.end());
  std::vector<std::vector<wire::Frame>> masked_frames;
  for (const ForwardedShares& f : out->forwarded_shares) {
    const size_t i = SecAggRound::IndexOf(f.recipient);
    if (gone.contains(i)) continue;
    const ForwardedShares got = Must(
        FromWire(link.Receive<wire::SecAggForwardedShares>(link.Encode(kAggregator, ToWire(f)))));
    Result<MaskedInput> reply = round.client(i).OnForwardedShares(got, round.input(i));
    ASSERT_TRUE(reply.ok()) << f.recipient << ": " << reply.status().ToString();
    masked_frames.push_back(link.Encode(f.recipient, ToWire(*reply)));
    ASSERT_EQ(masked_frames.back().size(), 1u + 3u);  // header + 12,000 bytes in 4 KiB
  }
  size_t completed = 0;
  for (size_t k = 0; k < 4; ++k) {
    for (const std::vector<wire::Frame>& frames : masked_frames) {
      std::optional<wire::Message> m = server_takes(frames[k]);
      ASSERT_EQ(m.has_value(), k == 3);
      if (!m) continue;
      EXPECT_EQ(at_server.pending_messages(), masked_frames.size() - ++completed);
      const MaskedInput input = Must(FromWire(std::get<wire::SecAggMaskedInput>(m->body)));
      ASSERT_EQ(input.masked.size(), 3000u);
      const Status s = round.server().OnMaskedInput(input);
      ASSERT_TRUE(s.ok()) << m->header.sender_id << ": " << s.ToString();
    }
  }
  ASSERT_TRUE((out = round.server().CloseStage()).ok()) << out.status().ToString();
  EXPECT_EQ(out->unmask_request->dropped, (std::vector<std::string>{SiteId(3), SiteId(11)}));
  ASSERT_EQ(out->unmask_request->survivors.size(), kN - 3);

  // Stage 3: the unmask request out, the shares back.
  const std::vector<wire::Frame> request_frames =
      link.Encode(kAggregator, ToWire(*out->unmask_request));
  gone.insert(drops.before_unmask.begin(), drops.before_unmask.end());
  size_t masking_key_shares = 0;
  for (const std::string& id : out->recipients) {
    const size_t i = SecAggRound::IndexOf(id);
    if (gone.contains(i)) continue;
    const UnmaskRequest request =
        Must(FromWire(link.Receive<wire::SecAggUnmaskRequest>(request_frames)));
    Result<UnmaskShares> reply = round.client(i).OnUnmaskRequest(request);
    ASSERT_TRUE(reply.ok()) << id << ": " << reply.status().ToString();
    deliver(link.Encode(id, ToWire(*reply)), [&](const wire::Message& m) -> Status {
      FM_ASSIGN_OR_RETURN(UnmaskShares s, FromWire(std::get<wire::SecAggUnmaskShares>(m.body)));
      for (const RevealedShare& r : s.shares) {
        masking_key_shares += r.kind == SecretKind::kMaskingKey;
      }
      return round.server().OnUnmaskShares(s);
    });
  }
  EXPECT_GT(masking_key_shares, 0u);  // both secret kinds crossed the wire
  ASSERT_TRUE((out = round.server().CloseStage()).ok()) << out.status().ToString();
  ASSERT_TRUE(out->result.has_value());
  EXPECT_EQ(at_server.pending_messages(), 0u);

  // Everyone who sent a masked input is in the sum, exactly.
  std::vector<size_t> contributors;
  for (size_t i = 0; i < kN; ++i) {
    if (i != 8 && i != 3 && i != 11) contributors.push_back(i);
  }
  std::vector<std::string> contributor_ids;
  for (size_t i : contributors) contributor_ids.push_back(SiteId(i));
  EXPECT_EQ(out->result->contributors, contributor_ids);
  EXPECT_EQ(out->result->sum, round.ExpectedSum(contributors));

  // And the same round without the wire gives the same bytes of output.
  SecAggRound direct(kN, options, kSeed);
  Result<SecAggOutbox> reference = direct.Run(drops);
  ASSERT_TRUE(reference.ok()) << reference.status().ToString();
  EXPECT_EQ(reference->result->sum, out->result->sum);
  EXPECT_EQ(reference->result->decoded_sum, out->result->decoded_sum);
  EXPECT_EQ(reference->result->contributors, out->result->contributors);
  std::printf("[ info     ] n=%zu, 3000 words: %zu frames, %zu bytes on the wire\n", kN,
              link.frame_count(), link.bytes());
}

// ---------------------------------------------------------------------------------------
// Conversions keep every field

void ExpectSameBoxes(const std::vector<SealedShares>& a, const std::vector<SealedShares>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].from, b[i].from);
    EXPECT_EQ(a[i].to, b[i].to);
    EXPECT_EQ(a[i].box, b[i].box);
  }
}

TEST_F(SecAggWireTest, ConversionsKeepEveryFieldBothWays) {
  SecAggOptions options;
  options.vector_size = 64;
  SecAggRound round(6, options, 99);
  // Run it in process, keeping one message of each kind, and convert each one both ways.
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  const AdvertiseKeys& ad = round.client(1).advertisement();
  const AdvertiseKeys ad2 = Must(FromWire(ToWire(ad)));
  EXPECT_EQ(ad2.federation_id, ad.federation_id);
  EXPECT_EQ(ad2.round, ad.round);
  EXPECT_EQ(ad2.client_id, ad.client_id);
  EXPECT_EQ(ad2.channel_public_key, ad.channel_public_key);
  EXPECT_EQ(ad2.masking_public_key, ad.masking_public_key);
  EXPECT_EQ(ad2.signature, ad.signature);

  const Roster& roster = round.roster();
  const wire::SecAggRoster wire_roster = ToWire(roster);
  ASSERT_EQ(wire_roster.members.size(), 6u);
  EXPECT_EQ(wire_roster.members[4].client_id, SiteId(4));
  const Roster roster2 = Must(FromWire(wire_roster));
  EXPECT_EQ(roster2.federation_id, "fed-test");
  EXPECT_EQ(roster2.round, 7u);
  EXPECT_EQ(roster2.graph_seed, roster.graph_seed);
  ASSERT_EQ(roster2.members.size(), roster.members.size());
  for (size_t i = 0; i < roster.members.size(); ++i) {
    EXPECT_EQ(roster2.members[i].federation_id, "fed-test");  // the roster's
    EXPECT_EQ(roster2.members[i].round, 7u);
    EXPECT_EQ(roster2.members[i].client_id, roster.members[i].client_id);
    EXPECT_EQ(roster2.members[i].channel_public_key, roster.members[i].channel_public_key);
    EXPECT_EQ(roster2.members[i].masking_public_key, roster.members[i].masking_public_key);
    EXPECT_EQ(roster2.members[i].signature, roster.members[i].signature);
  }

  const ShareKeys sk = Must(round.client(0).OnRoster(roster));
  const ShareKeys sk2 = Must(FromWire(ToWire(sk)));
  EXPECT_EQ(sk2.federation_id, sk.federation_id);
  EXPECT_EQ(sk2.round, sk.round);
  EXPECT_EQ(sk2.client_id, sk.client_id);
  ExpectSameBoxes(sk2.boxes, sk.boxes);
  ASSERT_TRUE(round.server().OnShares(sk2).ok());
  round.ShareKeys({0});
  ASSERT_TRUE(round.Close().ok());

  const ForwardedShares& fs = round.forwarded(3);
  const ForwardedShares fs2 = Must(FromWire(ToWire(fs)));
  EXPECT_EQ(fs2.federation_id, fs.federation_id);
  EXPECT_EQ(fs2.round, fs.round);
  EXPECT_EQ(fs2.recipient, SiteId(3));
  ExpectSameBoxes(fs2.boxes, fs.boxes);

  const MaskedInput mi = Must(round.client(3).OnForwardedShares(fs2, round.input(3)));
  const wire::SecAggMaskedInput wire_mi = ToWire(mi);
  EXPECT_EQ(wire_mi.masked.dtype, wire::DType::kUint32);
  EXPECT_EQ(wire_mi.masked.element_count, 64u);
  const MaskedInput mi2 = Must(FromWire(wire_mi));
  EXPECT_EQ(mi2.federation_id, mi.federation_id);
  EXPECT_EQ(mi2.round, mi.round);
  EXPECT_EQ(mi2.client_id, SiteId(3));
  EXPECT_EQ(mi2.masked, mi.masked);
  ASSERT_TRUE(round.server().OnMaskedInput(mi2).ok());
  round.MaskedInput({2, 3});
  ASSERT_TRUE(round.Close().ok());

  const UnmaskRequest& ur = round.unmask_request();
  const UnmaskRequest ur2 = Must(FromWire(ToWire(ur)));
  EXPECT_EQ(ur2.federation_id, ur.federation_id);
  EXPECT_EQ(ur2.round, ur.round);
  EXPECT_EQ(ur2.survivors, ur.survivors);
  EXPECT_EQ(ur2.dropped, (std::vector<std::string>{SiteId(2)}));

  const UnmaskShares us = Must(round.client(1).OnUnmaskRequest(ur2));
  const UnmaskShares us2 = Must(FromWire(ToWire(us)));
  EXPECT_EQ(us2.federation_id, us.federation_id);
  EXPECT_EQ(us2.round, us.round);
  EXPECT_EQ(us2.client_id, SiteId(1));
  ASSERT_EQ(us2.shares.size(), us.shares.size());
  std::set<SecretKind> kinds;
  for (size_t i = 0; i < us.shares.size(); ++i) {
    EXPECT_EQ(us2.shares[i].owner, us.shares[i].owner);
    EXPECT_EQ(us2.shares[i].kind, us.shares[i].kind);
    EXPECT_EQ(us2.shares[i].x, us.shares[i].x);
    EXPECT_EQ(us2.shares[i].y, us.shares[i].y);
    kinds.insert(us2.shares[i].kind);
  }
  ASSERT_TRUE(round.server().OnUnmaskShares(us2).ok());
  round.Unmask({1});
  Result<SecAggOutbox> out = round.Close();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->result->sum, round.ExpectedSum({0, 1, 3, 4, 5}));
  // With 6 clients the graph is complete (k = 5), so site-001 holds shares of site-002's
  // masking key and of the others' self-mask seeds: both kinds were converted.
  EXPECT_EQ(kinds.size(), 2u);

  // Secret kinds map to the wire's numbering, which starts at 1 (0 = unset).
  const wire::SecAggUnmaskShares wire_us = ToWire(us);
  for (size_t i = 0; i < us.shares.size(); ++i) {
    EXPECT_EQ(static_cast<uint32_t>(wire_us.shares[i].kind),
              us.shares[i].kind == SecretKind::kSelfMaskSeed ? 1u : 2u);
  }
}

// ---------------------------------------------------------------------------------------
// FromWire refuses malformed fields

wire::SecAggSealedShares WireBox(size_t size) {
  return {"site-1", "site-2", std::vector<uint8_t>(size, 0x5a)};
}

TEST_F(SecAggWireTest, BoxesOfTheWrongSizeAreRefused) {
  wire::SecAggShareKeys sk{"fed-test", 7, "site-1", {WireBox(kShareBoxSize), WireBox(103)}};
  Result<ShareKeys> s = FromWire(sk);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(),
              HasSubstr("ShareKeys box 1 (from 'site-1' to 'site-2') is 103 bytes; a sealed "
                        "pair of shares is 104"));
  sk.boxes[1] = WireBox(kShareBoxSize);
  EXPECT_TRUE(FromWire(sk).ok());

  wire::SecAggForwardedShares fs{"fed-test", 7, "site-2", {WireBox(0)}};
  EXPECT_EQ(FromWire(fs).status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(FromWire(fs).status().message(), HasSubstr("ForwardedShares box 0"));
  fs.boxes[0] = WireBox(kShareBoxSize + 1);
  EXPECT_THAT(FromWire(fs).status().message(), HasSubstr("is 105 bytes"));
  fs.boxes[0] = WireBox(kShareBoxSize);
  EXPECT_TRUE(FromWire(fs).ok());
}

TEST_F(SecAggWireTest, MalformedRevealedSharesAreRefused) {
  auto share = [](wire::SecAggSecretKind kind, uint8_t x, size_t y) {
    return wire::SecAggUnmaskShares{
        "fed-test", 7, "site-1", {{"site-2", kind, x, std::vector<uint8_t>(y, 1)}}};
  };
  const auto seed = wire::SecAggSecretKind::kSelfMaskSeed;
  EXPECT_TRUE(FromWire(share(seed, 1, 32)).ok());
  EXPECT_EQ(Must(FromWire(share(wire::SecAggSecretKind::kMaskingKey, 255, 32))).shares[0].kind,
            SecretKind::kMaskingKey);
  const std::pair<wire::SecAggUnmaskShares, std::string> cases[] = {
      {share(static_cast<wire::SecAggSecretKind>(0), 1, 32),
       "UnmaskShares from 'site-1': share 0 (of 'site-2') has secret kind 0, which is neither"},
      {share(static_cast<wire::SecAggSecretKind>(3), 1, 32), "has secret kind 3"},
      {share(seed, 0, 32), "share 0 (of 'site-2') has x = 0; Shamir x-coordinates are 1..255"},
      {share(seed, 1, 31), "share 0 (of 'site-2') is 31 bytes; a share of a secret is 32"},
      {share(seed, 1, 33), "is 33 bytes"},
      {share(seed, 1, 0), "is 0 bytes"},
  };
  for (const auto& [message, needle] : cases) {
    const Status s = FromWire(message).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << needle;
    EXPECT_THAT(s.message(), HasSubstr(needle));
  }
  // ToWire writes an invalid SecretKind as kind 0, which the wire refuses to carry.
  UnmaskShares bad{"fed-test",
                   7,
                   "site-1",
                   {{"site-2", static_cast<SecretKind>(9), 1, std::vector<uint8_t>(32, 1)}}};
  const wire::SecAggUnmaskShares w = ToWire(bad);
  EXPECT_EQ(static_cast<uint32_t>(w.shares[0].kind), 0u);
  wire::Header h{"fed-test", "site-1", 7, 0, 1};
  const Status s = wire::Encode(wire::Message{h, w}).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("share 0 kind 0 is unknown"));
}

TEST_F(SecAggWireTest, MaskedPayloadOfAnotherEncodingIsRefused) {
  const std::vector<uint32_t> words = {7, 8, 9};
  wire::SecAggMaskedInput m{"fed-test", 7, "site-1", wire::Uint32Payload(words), {}};
  EXPECT_EQ(Must(FromWire(m)).masked, words);

  m.masked.codec = "fp16";
  Status s = FromWire(m).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("the masked input of 'site-1': payload has codec \"fp16\""));

  m.masked = wire::FloatPayload(std::vector<float>{1, 2, 3});
  s = FromWire(m).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("dtype 1; it must be uint32 (2)"));

  m.masked = wire::Uint32Payload(words);
  m.masked.bytes.pop_back();
  s = FromWire(m).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("11 bytes for 3 uint32 elements"));

  m.masked = wire::Uint32Payload(words);
  m.masked.element_count = 2;
  EXPECT_EQ(FromWire(m).status().code(), StatusCode::kInvalidArgument);
}

wire::FitTask SecAggTask(size_t values, const wire::SecAggParameters& p) {
  wire::FitTask t;
  t.round = 7;
  t.global_model = wire::FloatPayload(std::vector<float>(values, 1.0f));
  t.secagg = p;
  return t;
}

TEST_F(SecAggWireTest, FitTaskSettingsNoClientAcceptsAreRefused) {
  const wire::Header h{"fed-test", kAggregator, 7, 0, 1};
  wire::SecAggParameters p;
  p.max_clients = 100;
  const SecAggOptions options = Must(FromWire(h, SecAggTask(10, p)));
  EXPECT_EQ(options.federation_id, "fed-test");
  EXPECT_EQ(options.round, 7u);
  EXPECT_EQ(options.vector_size, 10u);
  EXPECT_EQ(options.max_clients, 100u);

  wire::FitTask plain = SecAggTask(10, p);
  plain.secagg.reset();
  Status s = FromWire(h, plain).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("does not ask for secure aggregation"));

  s = FromWire(h, SecAggTask(0, p)).status();  // an empty model: nothing to aggregate
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("vector_size must be in [1, 268435456]; got 0"));

  wire::SecAggParameters overflow = p;
  overflow.bits = 32;  // 100 sums of 2^31 - 1 wrap around
  s = FromWire(h, SecAggTask(10, overflow)).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("wrap around"));

  wire::SecAggParameters odd = p;
  odd.neighbours = 5;
  s = FromWire(h, SecAggTask(10, odd)).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the FitTask's secure aggregation settings"));

  // ToWire resolves max_clients 0 to the allowlist, and keeps an explicit value.
  SecAggOptions server;
  server.federation_id = "fed-test";
  server.vector_size = 10;
  EXPECT_EQ(ToWire(server, 37).max_clients, 37u);
  server.max_clients = 500;
  EXPECT_EQ(ToWire(server, 37).max_clients, 500u);
}

// The wire layer's checks on FitTask.secagg are structural copies of SecAggOptions'
// rules (core/ cannot call them). Over a grid of settings: whatever the wire accepts,
// SecAggOptions accepts, and the wire refuses a valid setting only for the one rule that
// is its own (an explicit threshold above 254 without an explicit degree, which no graph
// can satisfy: ResolveGraphParameters refuses it later).
TEST_F(SecAggWireTest, WireChecksAgreeWithSecAggOptionsValidate) {
  const wire::Header h{"fed-test", kAggregator, 7, 0, 1};
  size_t accepted = 0, refused = 0;
  for (uint32_t neighbours : {0u, 2u, 7u, 8u, 254u, 256u}) {
    for (uint32_t threshold : {0u, 1u, 4u, 5u, 8u, 9u, 200u, 255u}) {
      for (uint32_t bits : {1u, 2u, 16u, 33u}) {
        for (double clip : {-1.0, 0.0, 1.0}) {
          for (uint64_t min_clients : {1u, 2u, 3u}) {
            wire::SecAggParameters p{threshold, neighbours, clip, bits, min_clients, 3};
            const wire::FitTask task = SecAggTask(4, p);
            const bool on_wire = wire::Encode(wire::Message{h, task}).ok();
            const bool valid = FromWire(h, task).ok();
            const bool wire_only = neighbours == 0 && threshold > 254;
            ASSERT_EQ(on_wire, valid && !wire_only)
                << "neighbours " << neighbours << " threshold " << threshold << " bits " << bits
                << " clip " << clip << " min_clients " << min_clients;
            (on_wire ? accepted : refused)++;
          }
        }
      }
    }
  }
  EXPECT_GT(accepted, 30u);
  EXPECT_GT(refused, 1000u);
}

// A box damaged between server and client crosses the wire (the wire checks its length,
// not its contents) and is caught by the client's AEAD, which leaves the client as it was.
TEST_F(SecAggWireTest, BoxDamagedInTransitIsCaughtByTheClient) {
  SecAggOptions options;
  options.vector_size = 16;
  SecAggRound round(5, options, 7);
  round.Advertise();
  ASSERT_TRUE(round.Close().ok());
  round.ShareKeys();
  ASSERT_TRUE(round.Close().ok());
  wire::SecAggForwardedShares w = ToWire(round.forwarded(2));
  w.boxes[1].box[50] ^= 0x01;
  WireLink link(round.options());
  const ForwardedShares damaged =
      Must(FromWire(link.Receive<wire::SecAggForwardedShares>(link.Encode(kAggregator, w))));
  Result<MaskedInput> refused = round.client(2).OnForwardedShares(damaged, round.input(2));
  EXPECT_EQ(refused.status().code(), StatusCode::kCorruption);
  EXPECT_EQ(round.client(2).stage(), SecAggStage::kShareKeys);
  const ForwardedShares intact = Must(FromWire(link.Receive<wire::SecAggForwardedShares>(
      link.Encode(kAggregator, ToWire(round.forwarded(2))))));
  EXPECT_TRUE(round.client(2).OnForwardedShares(intact, round.input(2)).ok());
}

}  // namespace
}  // namespace fedmesh
