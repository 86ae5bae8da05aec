// Resumed uploads in the wire codec: TransferQuery / TransferResume travel and are checked,
// and a Reassembler keeps a partial message across a lost connection (MarkResumable).
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/wire/wire_codec.h"
#include "tests/core/wire_test_util.h"

namespace fedmesh::wire {
namespace {

TEST(WireResume, QueryAndResumeTravelFieldByField) {
  const Message q{TestHeader(8), TransferQuery{77}};
  auto got_q = Decode(MustEncode(q));
  ASSERT_TRUE(got_q.ok()) << got_q.status().ToString();
  EXPECT_EQ(std::get<TransferQuery>(got_q->body).message_id, 77u);
  EXPECT_TRUE(*got_q == q);
  EXPECT_EQ(MessageTypeName(TypeOf(q.body)), "TransferQuery");

  for (const TransferResume& r : {TransferResume{77, TransferState::kPartial, 5},
                                  TransferResume{78, TransferState::kUnknown, 0}}) {
    const Message m{TestHeader(9), r};
    auto got = Decode(MustEncode(m));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == m);
  }
}

TEST(WireResume, MeaninglessResumesAreRefusedBothWays) {
  WireLimits l;
  const std::pair<TransferResume, const char*> bad[] = {
      {{1, static_cast<TransferState>(7), 0}, "TransferResume state 7 is unknown"},
      {{1, TransferState::kUnknown, 3}, "next_chunk is 3 for state UNKNOWN; it must be 0"},
      {{1, TransferState::kPartial, l.max_chunks}, "is past the chunk limit"},
  };
  for (const auto& [r, needle] : bad) {
    const Message m{TestHeader(), r};
    auto encoded = Encode(m, l);
    ASSERT_FALSE(encoded.ok());
    EXPECT_NE(encoded.status().message().find(needle), std::string::npos)
        << encoded.status().ToString();
    // The same bytes from a peer (written past the sender's checks) are refused too.
    auto frame = MustEncode(Message{TestHeader(), TransferResume{1, TransferState::kPartial, 1}});
    const Frame forged = Rewrite(frame[0], [&](pb::Envelope& e) {
      e.mutable_transfer_resume()->set_state(static_cast<pb::TransferState>(r.state));
      e.mutable_transfer_resume()->set_next_chunk(r.next_chunk);
    });
    Reassembler re(l);
    auto added = re.Add(forged);
    ASSERT_FALSE(added.ok());
    EXPECT_NE(added.status().message().find(needle), std::string::npos)
        << added.status().ToString();
  }
}

// A pending message survives MarkResumable: NextChunk tells where it stopped, the next
// chunk continues it, and the message completes equal to the one sent.
TEST(WireResume, APartialMessageContinuesAfterMarkResumable) {
  WireLimits l;
  l.max_chunk_bytes = 400;
  const auto update = Values(400, 6);  // 4 chunks
  const Message m = FitResultMessage(update);
  auto frames = MustEncode(m, l);
  Reassembler r(l);
  ASSERT_TRUE(r.Add(frames[0]).ok());
  ASSERT_TRUE(r.Add(frames[1]).ok());
  EXPECT_EQ(r.NextChunk("node-7", 42), 1u);
  EXPECT_EQ(r.NextChunk("node-7", 43), std::nullopt);
  r.MarkResumable();
  const auto progress = r.PendingProgress();
  ASSERT_EQ(progress.size(), 1u);
  EXPECT_EQ(progress[0].sender_id, "node-7");
  EXPECT_EQ(progress[0].message_id, 42u);
  EXPECT_EQ(progress[0].next_chunk, 1u);
  EXPECT_EQ(progress[0].federation_id, "fed-hospitals");
  ExpectRestCompletes(r, frames, 2, m);
}

// A header with the key of a resumable message starts it over; of a live one, it is a
// duplicate (unchanged).
TEST(WireResume, AHeaderReplacesOnlyAResumableMessage) {
  WireLimits l;
  l.max_chunk_bytes = 400;
  const Message m = FitResultMessage(Values(400, 6));
  auto frames = MustEncode(m, l);
  Reassembler r(l);
  ASSERT_TRUE(r.Add(frames[0]).ok());
  ASSERT_TRUE(r.Add(frames[1]).ok());
  auto dup = r.Add(frames[0]);
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("already has message 42"), std::string::npos);

  r.MarkResumable();
  ASSERT_TRUE(r.Add(frames[0]).ok());  // started over
  EXPECT_EQ(r.NextChunk("node-7", 42), 0u);
  EXPECT_EQ(r.pending_declared_bytes(), 1600u);
  // A chunk makes it live again: another header is a duplicate once more.
  ASSERT_TRUE(r.Add(frames[1]).ok());
  EXPECT_FALSE(r.Add(frames[0]).ok());
  ExpectRestCompletes(r, frames, 2, m);
}

}  // namespace
}  // namespace fedmesh::wire
