// SecAggParticipant (node/secagg_participant.h), a node's side of a secure round, fed bad
// input: a task that asks for no secure aggregation, an update of the wrong size, a
// message the aggregator never sends, messages out of order, and a roster whose signature
// was tampered with. Each is refused with its reason; a good roster is then still taken.
#include "node/secagg_participant.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "core/wire/wire_codec.h"
#include "crypto/secagg/secagg_wire.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;

struct Fixture {
  std::vector<Identity> ids;
  std::vector<PublicIdentity> allow;
  wire::Header header{"fed", "aggregator", 3, 0, 1};
  wire::FitTask task;

  Fixture() {
    for (const char* n : {"a", "b", "c"}) {
      ids.push_back(Identity::Generate(n).value());
      allow.push_back(ids.back().public_identity());
    }
    task.round = 3;
    task.global_model = wire::FloatPayload(std::vector<float>(8, 0.0f));
    task.secagg = wire::SecAggParameters{0, 0, 1.0, 16, 3, 3, 0.0};
  }
  SecAggParticipant Start(size_t i) {
    return SecAggParticipant::Start(header, task, ids[i], allow, std::vector<float>(8, 0.1f)).value();
  }
};

TEST(SecAggParticipant, BadStartsAreRefused) {
  Fixture f;
  wire::FitTask plain = f.task;
  plain.secagg.reset();
  auto no = SecAggParticipant::Start(f.header, plain, f.ids[0], f.allow, std::vector<float>(8));
  ASSERT_FALSE(no.ok());
  EXPECT_EQ(no.status().code(), StatusCode::kFailedPrecondition);
  auto size = SecAggParticipant::Start(f.header, f.task, f.ids[0], f.allow, std::vector<float>(7));
  ASSERT_FALSE(size.ok());
  EXPECT_THAT(size.status().message(), HasSubstr("the update has 7 values"));
  wire::FitTask odd = f.task;
  odd.secagg->neighbours = 3;
  EXPECT_FALSE(SecAggParticipant::Start(f.header, odd, f.ids[0], f.allow, std::vector<float>(8)).ok());
}

TEST(SecAggParticipant, BadMessagesAreRefusedAndAGoodRosterStillTaken) {
  Fixture f;
  std::vector<SecAggParticipant> p;
  for (size_t i = 0; i < 3; ++i) p.push_back(f.Start(i));
  EXPECT_THAT(p[0].OnMessage(wire::Heartbeat{}).status().message(),
              HasSubstr("not a message the aggregator sends"));
  // Shares before the roster: out of order.
  wire::SecAggForwardedShares early{"fed", 3, "a", {}};
  EXPECT_FALSE(p[0].OnMessage(early).ok());
  // The roster of the three advertisements, once with one signature flipped.
  wire::SecAggRoster roster{"fed", 3, {}, {}};
  for (auto& q : p) {
    auto adv = std::get<wire::SecAggAdvertiseKeys>(q.advertisement());
    roster.members.push_back({adv.client_id, adv.channel_public_key, adv.masking_public_key, adv.signature});
  }
  wire::SecAggRoster forged = roster;
  forged.members[1].signature[0] ^= 1;
  auto bad = p[0].OnMessage(forged);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("signature"));
  auto good = p[1].OnMessage(roster);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_TRUE(std::holds_alternative<wire::SecAggShareKeys>(*good));
  EXPECT_FALSE(p[1].finished());
}

// Issue 26 item 5: the node sets its own floors. Without them a task with min_clients 2,
// a weak threshold or less noise than the site agreed to was taken as the aggregator said.
TEST(SecAggParticipant, TasksBelowTheSitesFloorsAreRefused) {
  Fixture f;
  SecAggFloors floors;
  floors.min_clients = 3;
  floors.min_threshold = 2;
  floors.min_noise_stddev = 0.5;
  wire::FitTask ok = f.task;
  ok.secagg->noise_stddev = 0.5;
  ASSERT_TRUE(SecAggParticipant::Start(f.header, ok, f.ids[0], f.allow, std::vector<float>(8), floors)
                  .ok());

  wire::FitTask two = ok;
  two.secagg->min_clients = 2;
  auto small = SecAggParticipant::Start(f.header, two, f.ids[0], f.allow, std::vector<float>(8), floors);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(small.status().message(), HasSubstr("[secagg] min_clients (3)"));
  // The default floors refuse it too: a roster of two shows each its partner's update.
  EXPECT_FALSE(SecAggParticipant::Start(f.header, two, f.ids[0], f.allow, std::vector<float>(8)).ok());

  wire::FitTask quiet = ok;
  quiet.secagg->noise_stddev = 0.1;
  auto noise = SecAggParticipant::Start(f.header, quiet, f.ids[0], f.allow, std::vector<float>(8), floors);
  ASSERT_FALSE(noise.ok());
  EXPECT_THAT(noise.status().message(), HasSubstr("[secagg] min_noise_stddev"));

  // A roster of 3 has degree 2 and the default threshold 2; a floor of 3 refuses it.
  floors.min_threshold = 3;
  auto weak = SecAggParticipant::Start(f.header, ok, f.ids[0], f.allow, std::vector<float>(8), floors);
  ASSERT_FALSE(weak.ok());
  EXPECT_THAT(weak.status().message(), HasSubstr("[secagg] min_threshold (3)"));
  EXPECT_THAT(weak.status().message(), HasSubstr("is 2"));
}

// Runs stages 0-2 for participants `p` (one per Fixture identity): the masked inputs, or
// the first error.
Result<std::vector<wire::SecAggMaskedInput>> MaskAll(std::vector<SecAggParticipant>& p) {
  wire::SecAggRoster roster{"fed", 3, {}, {}};
  for (auto& q : p) {
    auto adv = std::get<wire::SecAggAdvertiseKeys>(q.advertisement());
    roster.members.push_back({adv.client_id, adv.channel_public_key, adv.masking_public_key, adv.signature});
  }
  std::map<std::string, wire::SecAggForwardedShares> forwarded;
  for (auto& q : p) {
    FM_ASSIGN_OR_RETURN(wire::Body shares, q.OnMessage(roster));
    for (auto& box : std::get<wire::SecAggShareKeys>(shares).boxes) {
      auto& f = forwarded[box.recipient];
      f.federation_id = "fed";
      f.round = 3;
      f.recipient = box.recipient;
      f.boxes.push_back(box);
    }
  }
  std::vector<wire::SecAggMaskedInput> out;
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string id = std::string(1, static_cast<char>('a' + i));
    FM_ASSIGN_OR_RETURN(wire::Body masked, p[i].OnMessage(forwarded[id]));
    out.push_back(std::get<wire::SecAggMaskedInput>(masked));
  }
  return out;
}

// Issue 26 item 5: a site masks at most one input per round. Before, a second secure
// aggregation of the same round (an aggregator retrying it without one member) was masked
// again, and the difference of the two sums would show that member's update.
TEST(SecAggParticipant, ASiteMasksAtMostOneInputPerRound) {
  Fixture f;
  std::vector<MaskLedger> ledgers(3);
  auto start = [&](size_t i) {
    return SecAggParticipant::Start(f.header, f.task, f.ids[i], f.allow,
                                    std::vector<float>(8, 0.1f), {}, &ledgers[i])
        .value();
  };
  std::vector<SecAggParticipant> first;
  for (size_t i = 0; i < 3; ++i) first.push_back(start(i));
  auto masked = MaskAll(first);
  ASSERT_TRUE(masked.ok()) << masked.status().ToString();
  EXPECT_EQ(masked->size(), 3u);
  EXPECT_TRUE(ledgers[0].contains({3, false}));

  std::vector<SecAggParticipant> again;  // the same round, a fresh roster
  for (size_t i = 0; i < 3; ++i) again.push_back(start(i));
  auto second = MaskAll(again);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("already sent a masked input for round 3"));

  // Without a ledger (as before issue 26) the second masking went through.
  std::vector<SecAggParticipant> unguarded;
  for (size_t i = 0; i < 3; ++i) unguarded.push_back(f.Start(i));
  EXPECT_TRUE(MaskAll(unguarded).ok());
}

}  // namespace
}  // namespace fedmesh
