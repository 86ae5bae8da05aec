// Issue 24 item 2: which rank owns which client in a sharded fedmesh-sim run, which data
// shards each rank needs, and the configurations that cannot be sharded.
#include "sim/client_shards.h"

#include <gtest/gtest.h>

#include <vector>

namespace fedmesh {
namespace {

TEST(ClientShards, EveryClientHasExactlyOneOwnerRoundRobin) {
  for (int ranks : {1, 2, 3, 7}) {
    std::vector<ClientShards> all;
    for (int r = 0; r < ranks; ++r) all.emplace_back(r, ranks);
    for (uint64_t c = 0; c < 50; ++c) {
      int owners = 0;
      for (const ClientShards& s : all) owners += s.Owns(c) ? 1 : 0;
      EXPECT_EQ(owners, 1) << "client " << c << " of " << ranks << " ranks";
      EXPECT_EQ(all[0].OwnerOf(c), static_cast<int>(c % static_cast<uint64_t>(ranks)));
    }
  }
}

TEST(ClientShards, OwnedCountsAddUpToTheClients) {
  for (int ranks : {1, 2, 3, 4}) {
    for (uint64_t clients : {uint64_t{4}, uint64_t{5}, uint64_t{2000001}}) {
      uint64_t total = 0;
      for (int r = 0; r < ranks; ++r) {
        const uint64_t n = ClientShards(r, ranks).OwnedCount(clients);
        uint64_t counted = 0;
        if (clients < 100) {
          for (uint64_t c = 0; c < clients; ++c) counted += ClientShards(r, ranks).Owns(c) ? 1 : 0;
          EXPECT_EQ(n, counted) << r << "/" << ranks << ", " << clients << " clients";
        }
        total += n;
      }
      EXPECT_EQ(total, clients);
    }
  }
  // Rank 0 takes the remainder first: 5 clients over 2 ranks are 3 + 2.
  EXPECT_EQ(ClientShards(0, 2).OwnedCount(5), 3u);
  EXPECT_EQ(ClientShards(1, 2).OwnedCount(5), 2u);
}

TEST(ClientShards, NeededDataShardsAreThoseOfOwnedClients) {
  // 12 clients on 4 data shards over 2 ranks: shard c mod 4; rank 0 owns the even clients,
  // which train on shards 0 and 2 only.
  EXPECT_EQ(ClientShards(0, 2).NeededDataShards(12, 4),
            (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(ClientShards(1, 2).NeededDataShards(12, 4),
            (std::vector<bool>{false, true, false, true}));
  // 3 shards (not a multiple of the ranks): both ranks have clients on every shard.
  EXPECT_EQ(ClientShards(1, 2).NeededDataShards(12, 3), (std::vector<bool>(3, true)));
  // One shard per client (the default): each rank needs its own clients' shards only.
  EXPECT_EQ(ClientShards(2, 3).NeededDataShards(6, 6),
            (std::vector<bool>{false, false, true, false, false, true}));
  // Few clients: shard 3 has no client at all here.
  EXPECT_EQ(ClientShards(0, 1).NeededDataShards(3, 4),
            (std::vector<bool>{true, true, true, false}));
  // One rank needs every shard that has a client.
  EXPECT_EQ(ClientShards().NeededDataShards(8, 4), (std::vector<bool>(4, true)));
}

TEST(ClientShards, AggregatorModeShardsOtherModesAndTooManyRanksDoNot) {
  SimOptions o;
  o.clients = 4;
  o.clients_per_round = 2;
  EXPECT_TRUE(CheckShardable(o, 1).ok());
  EXPECT_TRUE(CheckShardable(o, 2).ok());
  EXPECT_TRUE(CheckShardable(o, 4).ok());
  Status too_many = CheckShardable(o, 5);
  EXPECT_EQ(too_many.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.message().find("5 MPI ranks for 4 clients"), std::string::npos)
      << too_many.message();
  for (SimMode mode : {SimMode::kGossip, SimMode::kLocal, SimMode::kCentral, SimMode::kAllreduce}) {
    o.mode = mode;
    EXPECT_TRUE(CheckShardable(o, 1).ok());
    Status s = CheckShardable(o, 2);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << SimModeName(mode);
    EXPECT_NE(s.message().find("runs in one process only"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace fedmesh
