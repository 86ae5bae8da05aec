// SecAggParticipant (node/secagg_participant.h), a node's side of a secure round, fed bad
// input: a task that asks for no secure aggregation, an update of the wrong size, a
// message the aggregator never sends, messages out of order, and a roster whose signature
// was tampered with. Each is refused with its reason; a good roster is then still taken.
#include "node/secagg_participant.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace fedmesh
