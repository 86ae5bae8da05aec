// A whole secure aggregation round in one process, for the secagg tests: n clients with
// deterministic identities, secrets (DeterministicRandom) and float inputs, one server,
// and drivers that carry each stage's messages between them. Clients listed in a stage's
// `skip` set send nothing in that stage (they dropped out, or the test delivers their
// message itself). Every message a driver carries must be accepted.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/rng.h"
#include "crypto/identity.h"
#include "crypto/secagg/fixed_point.h"
#include "crypto/secagg/secagg_client.h"
#include "crypto/secagg/secagg_server.h"
#include "crypto/secagg/secure_random.h"

namespace fedmesh::secagg_test {

inline std::string SiteId(size_t i) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "site-%03zu", i);
  return buf;
}

// The seed of client i's DeterministicRandom in a harness with seed `seed`.
inline uint64_t ClientRngSeed(uint64_t seed, size_t i) { return seed * 100003 + i + 1; }

class SecAggRound {
 public:
  // Options as given, with federation "fed-test" and round 7 unless set.
  SecAggRound(size_t n, SecAggOptions options, uint64_t seed) : seed_(seed) {
    if (options.federation_id.empty()) options.federation_id = "fed-test";
    if (options.round == 0) options.round = 7;
    options_ = options;
    DeterministicRandom keys(seed ^ 0x5eed);
    for (size_t i = 0; i < n; ++i) {
      std::array<uint8_t, 32> curve{}, sign{};
      keys.Fill(curve);
      keys.Fill(sign);
      Result<Identity> id = Identity::FromSecrets(SiteId(i), curve, sign);
      EXPECT_TRUE(id.ok()) << id.status().ToString();
      identities_.push_back(std::make_unique<Identity>(std::move(id).value()));
      allowlist_.push_back(identities_.back()->public_identity());
    }
    Result<SecAggServer> server =
        SecAggServer::Create(options_, allowlist_, std::make_unique<DeterministicRandom>(seed));
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::make_unique<SecAggServer>(std::move(server).value());
    Rng input_rng(seed);
    for (size_t i = 0; i < n; ++i) {
      Result<SecAggClient> client =
          SecAggClient::Create(options_, *identities_[i], allowlist_,
                               std::make_unique<DeterministicRandom>(ClientRngSeed(seed, i)));
      EXPECT_TRUE(client.ok()) << client.status().ToString();
      clients_.push_back(std::make_unique<SecAggClient>(std::move(client).value()));
      // Mostly inside the clip; a few far outside it, so clipping is exercised too.
      std::vector<float> x(options_.vector_size);
      const double spread = i % 7 == 3 ? 10.0 : 0.5 / std::sqrt(double(options_.vector_size));
      for (float& v : x) v = static_cast<float>(input_rng.Normal(0.0, spread));
      inputs_.push_back(std::move(x));
    }
  }

  size_t n() const { return clients_.size(); }
  const SecAggOptions& options() const { return options_; }
  SecAggServer& server() { return *server_; }
  SecAggClient& client(size_t i) { return *clients_[i]; }
  const Identity& identity(size_t i) const { return *identities_[i]; }
  const std::vector<PublicIdentity>& allowlist() const { return allowlist_; }
  const std::vector<float>& input(size_t i) const { return inputs_[i]; }
  void set_input(size_t i, std::vector<float> x) { inputs_[i] = std::move(x); }
  uint64_t seed() const { return seed_; }

  // What the last successful Close() returned per stage.
  const Roster& roster() const { return *roster_; }
  const ForwardedShares& forwarded(size_t i) const { return forwarded_.at(i); }
  bool has_forwarded(size_t i) const { return forwarded_.contains(i); }
  const UnmaskRequest& unmask_request() const { return *unmask_request_; }

  // The plain Z_2^32 sum of the encodings of the given clients' inputs.
  std::vector<uint32_t> ExpectedSum(const std::vector<size_t>& contributors) const {
    std::vector<uint32_t> sum(options_.vector_size, 0);
    const FixedPointOptions fp = options_.fixed_point(n());
    for (size_t i : contributors) {
      Result<std::vector<uint32_t>> enc = EncodeFixedPoint(inputs_[i], fp);
      EXPECT_TRUE(enc.ok());
      for (size_t j = 0; j < sum.size(); ++j) sum[j] += (*enc)[j];
    }
    return sum;
  }

  void Advertise(const std::set<size_t>& skip = {}) {
    for (size_t i = 0; i < n(); ++i) {
      if (skip.contains(i)) continue;
      const Status s = server_->OnAdvertise(clients_[i]->advertisement());
      ASSERT_TRUE(s.ok()) << SiteId(i) << ": " << s.ToString();
    }
  }
  void ShareKeys(const std::set<size_t>& skip = {}) {
    ASSERT_NE(roster_, nullptr) << "no roster yet: close AdvertiseKeys first";
    for (size_t i = 0; i < n(); ++i) {
      if (skip.contains(i) || !InRoster(i)) continue;
      Result<fedmesh::ShareKeys> reply = clients_[i]->OnRoster(*roster_);
      ASSERT_TRUE(reply.ok()) << SiteId(i) << ": " << reply.status().ToString();
      const Status s = server_->OnShares(*reply);
      ASSERT_TRUE(s.ok()) << SiteId(i) << ": " << s.ToString();
    }
  }
  void MaskedInput(const std::set<size_t>& skip = {}) {
    ASSERT_FALSE(forwarded_.empty()) << "no forwarded shares yet: close ShareKeys first";
    for (size_t i = 0; i < n(); ++i) {
      if (skip.contains(i) || !has_forwarded(i)) continue;
      Result<fedmesh::MaskedInput> reply =
          clients_[i]->OnForwardedShares(forwarded_.at(i), inputs_[i]);
      ASSERT_TRUE(reply.ok()) << SiteId(i) << ": " << reply.status().ToString();
      const Status s = server_->OnMaskedInput(*reply);
      ASSERT_TRUE(s.ok()) << SiteId(i) << ": " << s.ToString();
    }
  }
  void Unmask(const std::set<size_t>& skip = {}) {
    ASSERT_NE(unmask_request_, nullptr) << "no unmask request yet: close MaskedInput first";
    std::set<std::string> survivors(unmask_request_->survivors.begin(),
                                    unmask_request_->survivors.end());
    for (size_t i = 0; i < n(); ++i) {
      if (skip.contains(i) || !survivors.contains(SiteId(i))) continue;
      Result<UnmaskShares> reply = clients_[i]->OnUnmaskRequest(*unmask_request_);
      ASSERT_TRUE(reply.ok()) << SiteId(i) << ": " << reply.status().ToString();
      const Status s = server_->OnUnmaskShares(*reply);
      ASSERT_TRUE(s.ok()) << SiteId(i) << ": " << s.ToString();
    }
  }

  // Closes the server's open stage and keeps what it sends.
  Result<SecAggOutbox> Close() {
    Result<SecAggOutbox> out = server_->CloseStage();
    if (!out.ok()) return out;
    if (out->roster) roster_ = out->roster;
    if (out->unmask_request) unmask_request_ = out->unmask_request;
    if (!out->forwarded_shares.empty()) {
      forwarded_.clear();
      for (const ForwardedShares& f : out->forwarded_shares) {
        forwarded_[IndexOf(f.recipient)] = f;
      }
    }
    return out;
  }

  // Which clients drop out before each stage (they send nothing from then on).
  struct Drops {
    std::set<size_t> before_advertise, before_share_keys, before_masked_input, before_unmask;
  };
  // Runs the whole round; the final Close()'s result.
  Result<SecAggOutbox> Run(const Drops& d) {
    std::set<size_t> gone = d.before_advertise;
    Advertise(gone);
    Result<SecAggOutbox> out = Close();
    if (!out.ok()) return out;
    gone.insert(d.before_share_keys.begin(), d.before_share_keys.end());
    ShareKeys(gone);
    if (!(out = Close()).ok()) return out;
    gone.insert(d.before_masked_input.begin(), d.before_masked_input.end());
    MaskedInput(gone);
    if (!(out = Close()).ok()) return out;
    gone.insert(d.before_unmask.begin(), d.before_unmask.end());
    Unmask(gone);
    return Close();
  }

  static size_t IndexOf(const std::string& id) { return std::stoul(id.substr(5)); }

 private:
  bool InRoster(size_t i) const {
    for (const AdvertiseKeys& m : roster_->members) {
      if (m.client_id == SiteId(i)) return true;
    }
    return false;
  }

  uint64_t seed_;
  SecAggOptions options_;
  std::vector<std::unique_ptr<Identity>> identities_;
  std::vector<PublicIdentity> allowlist_;
  std::unique_ptr<SecAggServer> server_;
  std::vector<std::unique_ptr<SecAggClient>> clients_;
  std::vector<std::vector<float>> inputs_;
  std::shared_ptr<const Roster> roster_;
  std::map<size_t, ForwardedShares> forwarded_;
  std::shared_ptr<const UnmaskRequest> unmask_request_;
};

}  // namespace fedmesh::secagg_test
