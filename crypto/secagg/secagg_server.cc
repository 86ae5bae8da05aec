#include "crypto/secagg/secagg_server.h"

#include <sodium.h>

#include <algorithm>
#include <utility>

#include "crypto/secagg/key_agreement.h"
#include "crypto/secagg/mask_prg.h"
#include "crypto/secagg/shamir.h"
#include "crypto/sodium.h"

namespace fedmesh {
namespace {

std::string Quoted(std::string_view id) { return QuotedId(id); }

// True when X25519 with `key` gives the all-zero point. Clamping makes every scalar a
// multiple of 8, which kills exactly the small-order points, so one fixed scalar tells.
bool IsLowOrder(const CurveKey& key) {
  uint8_t scalar[crypto_scalarmult_SCALARBYTES] = {1};
  uint8_t point[crypto_scalarmult_BYTES];
  return crypto_scalarmult(point, scalar, key.data()) != 0;
}

size_t Count(const std::vector<bool>& v) {
  return static_cast<size_t>(std::count(v.begin(), v.end(), true));
}

}  // namespace

Result<SecAggServer> SecAggServer::Create(SecAggOptions options,
                                          std::span<const PublicIdentity> allowlist,
                                          std::unique_ptr<SecureRandom> rng) {
  FM_RETURN_IF_ERROR(options.Validate());
  FM_RETURN_IF_ERROR(InitSodium());
  SecAggServer server;
  for (const PublicIdentity& member : allowlist) {
    if (!server.allowlist_.emplace(member.name, member).second) {
      return Status::InvalidArgument("the secure aggregation allowlist names " +
                                     Quoted(member.name) + " twice");
    }
  }
  server.fixed_point_ = options.fixed_point(allowlist.size());
  FM_RETURN_IF_ERROR(server.fixed_point_.Validate());
  server.options_ = std::move(options);
  server.rng_ = rng ? std::move(rng) : std::make_unique<SodiumRandom>();
  return server;
}

size_t SecAggServer::accepted() const {
  switch (stage_) {
    case SecAggStage::kAdvertiseKeys:
      return advertised_.size();
    case SecAggStage::kShareKeys:
      return Count(in_u1_);
    case SecAggStage::kMaskedInput:
      return Count(in_u2_);
    case SecAggStage::kUnmasking:
      return Count(unmasked_);
    case SecAggStage::kFinished:
      return 0;
  }
  return 0;
}

size_t SecAggServer::expected() const {
  switch (stage_) {
    case SecAggStage::kAdvertiseKeys:
      return allowlist_.size();
    case SecAggStage::kShareKeys:
      return graph_->size() - RevokedWaitedFor(nullptr, in_u1_);
    case SecAggStage::kMaskedInput:
      return Count(in_u1_) - RevokedWaitedFor(&in_u1_, in_u2_);
    case SecAggStage::kUnmasking:
      return Count(in_u2_) - RevokedWaitedFor(&in_u2_, unmasked_);
    case SecAggStage::kFinished:
      return 0;
  }
  return 0;
}

size_t SecAggServer::RevokedWaitedFor(const std::vector<bool>* members, const std::vector<bool>& sent) const {
  size_t n = 0;
  for (const std::string& id : revoked_) {
    const std::optional<uint32_t> i = graph_->IndexOf(id);
    if (i && (members == nullptr || (*members)[*i]) && !sent[*i]) ++n;
  }
  return n;
}

Status SecAggServer::CheckMessage(std::string_view what, SecAggStage stage,
                                  std::string_view federation_id, uint64_t round,
                                  std::string_view sender) const {
  if (federation_id != options_.federation_id || round != options_.round) {
    return Status::InvalidArgument(
        std::string(what) + " from " + Quoted(sender) + " is for federation " +
        Quoted(federation_id) + " round " + std::to_string(round) + "; this is federation " +
        Quoted(options_.federation_id) + " round " + std::to_string(options_.round));
  }
  if (stage != stage_) {
    return Status::FailedPrecondition(std::string(what) + " from " + Quoted(sender) +
                                      " belongs to stage " + std::string(SecAggStageName(stage)) +
                                      ", which is " + (stage < stage_ ? "closed" : "not open yet") +
                                      "; the server is in stage " +
                                      std::string(SecAggStageName(stage_)));
  }
  if (!allowlist_.contains(sender)) {
    return Status::PermissionDenied(std::string(what) + " comes from " + Quoted(sender) +
                                    ", who is not on the allowlist");
  }
  return Status::OK();
}

Result<uint32_t> SecAggServer::RosterIndex(std::string_view what, std::string_view sender,
                                           const std::vector<bool>* members,
                                           std::string_view set) const {
  const std::optional<uint32_t> index = graph_->IndexOf(sender);
  if (!index) {
    return Status::FailedPrecondition(std::string(what) + " comes from " + Quoted(sender) +
                                      ", who is not in this round's roster");
  }
  if (members != nullptr && !(*members)[*index]) {
    return Status::FailedPrecondition(std::string(what) + " comes from " + Quoted(sender) +
                                      ", who is not in " + std::string(set));
  }
  return *index;
}

bool SecAggServer::Withdraw(std::string_view client) {
  if (stage_ != SecAggStage::kAdvertiseKeys || advertised_.contains(client)) return false;
  auto it = allowlist_.find(client);
  if (it == allowlist_.end()) return false;
  allowlist_.erase(it);
  return true;
}

bool SecAggServer::Revoke(std::string_view client) {
  auto it = allowlist_.find(client);
  if (it == allowlist_.end()) return false;
  allowlist_.erase(it);
  revoked_.emplace(client);
  switch (stage_) {
    case SecAggStage::kAdvertiseKeys:
      // No roster yet: it leaves with its keys, and no one will share a secret with it.
      advertised_.erase(std::string(client));
      return true;
    case SecAggStage::kFinished:
      return false;
    default:
      break;
  }
  const std::optional<uint32_t> i = graph_->IndexOf(client);
  if (!i) return false;
  switch (stage_) {
    case SecAggStage::kShareKeys:
      return !in_u1_[*i];
    case SecAggStage::kMaskedInput:
      return in_u1_[*i] && !in_u2_[*i];
    case SecAggStage::kUnmasking:
      return in_u2_[*i] && !unmasked_[*i];
    default:
      return false;
  }
}

Status SecAggServer::OnAdvertise(const AdvertiseKeys& m) {
  FM_RETURN_IF_ERROR(CheckMessage("AdvertiseKeys", SecAggStage::kAdvertiseKeys, m.federation_id,
                                  m.round, m.client_id));
  if (advertised_.contains(m.client_id)) {
    return Status::AlreadyExists("client " + Quoted(m.client_id) +
                                 " has already advertised its keys for this round");
  }
  const std::vector<uint8_t> signed_bytes =
      AdvertiseSignedBytes(options_.federation_id, options_.round, m.client_id,
                           m.channel_public_key, m.masking_public_key);
  if (!VerifySignature(allowlist_.find(m.client_id)->second, signed_bytes, m.signature)) {
    return Status::PermissionDenied("the key signature of " + Quoted(m.client_id) +
                                    " does not verify against its enrolled identity");
  }
  // A low-order key agrees on the all-zero secret with everyone. Every neighbour would
  // refuse the roster over it, so one bad key must not get that far.
  for (const auto& [key, name] :
       {std::pair{&m.channel_public_key, "channel"}, std::pair{&m.masking_public_key, "masking"}}) {
    if (IsLowOrder(*key)) {
      return Status::InvalidArgument("the " + std::string(name) + " public key of " +
                                     Quoted(m.client_id) +
                                     " is a low-order point; no secret can be agreed with it");
    }
  }
  advertised_.emplace(m.client_id, m);
  return Status::OK();
}

Status SecAggServer::OnShares(const ShareKeys& m) {
  FM_RETURN_IF_ERROR(
      CheckMessage("ShareKeys", SecAggStage::kShareKeys, m.federation_id, m.round, m.client_id));
  FM_ASSIGN_OR_RETURN(uint32_t u, RosterIndex("ShareKeys", m.client_id, nullptr, ""));
  if (in_u1_[u]) {
    return Status::AlreadyExists("client " + Quoted(m.client_id) +
                                 " has already sent its shares for this round");
  }
  const std::span<const uint32_t> row = graph_->Neighbours(u);
  if (m.boxes.size() != row.size()) {
    return Status::InvalidArgument("ShareKeys from " + Quoted(m.client_id) + " carries " +
                                   std::to_string(m.boxes.size()) + " boxes; it has " +
                                   std::to_string(row.size()) + " neighbours, one box each");
  }
  std::vector<bool> covered(row.size(), false);
  for (const SealedShares& box : m.boxes) {
    if (box.from != m.client_id) {
      return Status::InvalidArgument("ShareKeys from " + Quoted(m.client_id) +
                                     " carries a box marked as from " + Quoted(box.from));
    }
    const std::optional<uint32_t> to = graph_->IndexOf(box.to);
    const std::optional<uint32_t> rank = to ? graph_->NeighbourRank(u, *to) : std::nullopt;
    if (!rank) {
      return Status::InvalidArgument("ShareKeys from " + Quoted(m.client_id) +
                                     " carries a box for " + Quoted(box.to) +
                                     ", who is not its graph neighbour");
    }
    if (covered[*rank]) {
      return Status::InvalidArgument("ShareKeys from " + Quoted(m.client_id) +
                                     " carries two boxes for " + Quoted(box.to));
    }
    if (box.box.size() != kShareBoxSize) {
      return Status::InvalidArgument("the box from " + Quoted(m.client_id) + " to " +
                                     Quoted(box.to) + " is " + std::to_string(box.box.size()) +
                                     " bytes; a box of two shares is " +
                                     std::to_string(kShareBoxSize));
    }
    covered[*rank] = true;
  }
  std::vector<std::vector<uint8_t>>& kept = boxes_[u];
  kept.assign(row.size(), {});
  for (const SealedShares& box : m.boxes) {
    kept[*graph_->NeighbourRank(u, *graph_->IndexOf(box.to))] = box.box;
  }
  in_u1_[u] = true;
  return Status::OK();
}

Status SecAggServer::OnMaskedInput(const MaskedInput& m) {
  FM_RETURN_IF_ERROR(CheckMessage("MaskedInput", SecAggStage::kMaskedInput, m.federation_id,
                                  m.round, m.client_id));
  FM_ASSIGN_OR_RETURN(uint32_t u, RosterIndex("MaskedInput", m.client_id, &in_u1_,
                                              "U1 (it did not share its keys)"));
  if (in_u2_[u]) {
    return Status::AlreadyExists("client " + Quoted(m.client_id) +
                                 " has already sent its masked input for this round");
  }
  if (m.masked.size() != options_.vector_size) {
    return Status::InvalidArgument(
        "the masked input from " + Quoted(m.client_id) + " has " + std::to_string(m.masked.size()) +
        " words; this round aggregates " + std::to_string(options_.vector_size));
  }
  for (size_t i = 0; i < masked_sum_.size(); ++i) masked_sum_[i] += m.masked[i];
  in_u2_[u] = true;
  return Status::OK();
}

Status SecAggServer::OnUnmaskShares(const UnmaskShares& m) {
  FM_RETURN_IF_ERROR(
      CheckMessage("UnmaskShares", SecAggStage::kUnmasking, m.federation_id, m.round, m.client_id));
  FM_ASSIGN_OR_RETURN(uint32_t v, RosterIndex("UnmaskShares", m.client_id, &in_u2_,
                                              "U2 (it did not send a masked input)"));
  if (unmasked_[v]) {
    return Status::AlreadyExists("client " + Quoted(m.client_id) +
                                 " has already sent its unmasking shares for this round");
  }
  // v owes one share for each neighbour in U1: of b_u if u is in U2, of s_sk_u otherwise.
  const std::span<const uint32_t> row = graph_->Neighbours(v);
  std::vector<bool> covered(row.size(), false);
  for (const RevealedShare& share : m.shares) {
    const std::optional<uint32_t> owner = graph_->IndexOf(share.owner);
    const std::optional<uint32_t> rank = owner ? graph_->NeighbourRank(v, *owner) : std::nullopt;
    if (!rank || !in_u1_[*owner]) {
      return Status::InvalidArgument("UnmaskShares from " + Quoted(m.client_id) +
                                     " carries a share of " + Quoted(share.owner) +
                                     ", who is not its neighbour in U1");
    }
    if (covered[*rank]) {
      return Status::InvalidArgument("UnmaskShares from " + Quoted(m.client_id) +
                                     " carries two shares of " + Quoted(share.owner));
    }
    const SecretKind wanted = in_u2_[*owner] ? SecretKind::kSelfMaskSeed : SecretKind::kMaskingKey;
    if (share.kind != wanted) {
      return Status::InvalidArgument(
          "UnmaskShares from " + Quoted(m.client_id) + " carries a share of the " +
          std::string(SecretKindName(share.kind)) + " of " + Quoted(share.owner) + ", who " +
          (in_u2_[*owner] ? "sent" : "did not send") + " a masked input: only its " +
          std::string(SecretKindName(wanted)) + " may be revealed");
    }
    const uint32_t expected_x = *graph_->NeighbourRank(*owner, v) + 1;
    if (share.x != expected_x) {
      return Status::InvalidArgument("the share of " + Quoted(share.owner) + " from " +
                                     Quoted(m.client_id) + " has x = " + std::to_string(share.x) +
                                     "; the share " + Quoted(m.client_id) +
                                     " holds has x = " + std::to_string(expected_x));
    }
    if (share.y.size() != kSecAggSecretSize) {
      return Status::InvalidArgument("the share of " + Quoted(share.owner) + " from " +
                                     Quoted(m.client_id) + " is " + std::to_string(share.y.size()) +
                                     " bytes, not " + std::to_string(kSecAggSecretSize));
    }
    covered[*rank] = true;
  }
  for (size_t r = 0; r < row.size(); ++r) {
    if (in_u1_[row[r]] && !covered[r]) {
      return Status::InvalidArgument("UnmaskShares from " + Quoted(m.client_id) +
                                     " lacks its share of neighbour " + Quoted(graph_->id(row[r])));
    }
  }
  for (const RevealedShare& share : m.shares) {
    CollectedShare kept;
    kept.x = share.x;
    std::copy(share.y.begin(), share.y.end(), kept.y.begin());
    shares_[*graph_->IndexOf(share.owner)].push_back(kept);
  }
  unmasked_[v] = true;
  return Status::OK();
}

std::vector<std::string> SecAggServer::Members(const std::vector<bool>& in) const {
  std::vector<std::string> out;
  for (uint32_t i = 0; i < in.size(); ++i) {
    if (in[i]) out.push_back(graph_->id(i));
  }
  return out;  // sorted: the graph's ids are
}

Result<SecAggOutbox> SecAggServer::CloseStage() {
  switch (stage_) {
    case SecAggStage::kAdvertiseKeys:
      return CloseAdvertiseKeys();
    case SecAggStage::kShareKeys:
      return CloseShareKeys();
    case SecAggStage::kMaskedInput:
      return CloseMaskedInput();
    case SecAggStage::kUnmasking:
      return CloseUnmasking();
    case SecAggStage::kFinished:
      break;
  }
  return Status::FailedPrecondition("the secure aggregation round has finished; nothing to close");
}

Result<SecAggOutbox> SecAggServer::CloseAdvertiseKeys() {
  FM_ASSIGN_OR_RETURN(SecAggGraphParameters params,
                      ResolveGraphParameters(options_, advertised_.size()));
  auto roster = std::make_shared<Roster>();
  roster->federation_id = options_.federation_id;
  roster->round = options_.round;
  rng_->Fill(roster->graph_seed);
  std::vector<std::string> ids;
  for (const auto& [id, keys] : advertised_) {  // std::map: sorted, i.e. graph index order
    roster->members.push_back(keys);
    ids.push_back(id);
  }
  FM_ASSIGN_OR_RETURN(SecAggGraph graph,
                      SecAggGraph::Build(ids, params.degree, roster->graph_seed));
  const size_t n = graph.size();

  SecAggOutbox out;
  out.closed = SecAggStage::kAdvertiseKeys;
  out.recipients = std::move(ids);
  out.roster = roster;
  graph_ = std::move(graph);
  threshold_ = params.threshold;
  roster_ = std::move(roster);
  boxes_.assign(n, {});
  in_u1_.assign(n, false);
  advertised_.clear();
  stage_ = SecAggStage::kShareKeys;
  return out;
}

Result<SecAggOutbox> SecAggServer::CloseShareKeys() {
  // A client with fewer than t neighbours in U1 would refuse to send its input (its masks
  // could never be removed), and then its own masking key could not be rebuilt either, so
  // the round would fail at the very end. Leave such clients out now, before anyone masks
  // against them; each removal can push a neighbour under t, hence the loop.
  std::vector<bool> u1 = in_u1_;
  for (bool changed = true; changed;) {
    changed = false;
    for (uint32_t u = 0; u < u1.size(); ++u) {
      if (!u1[u]) continue;
      const std::span<const uint32_t> row = graph_->Neighbours(u);
      const size_t holders = static_cast<size_t>(
          std::count_if(row.begin(), row.end(), [&](uint32_t v) { return bool(u1[v]); }));
      if (holders < threshold_) {
        u1[u] = false;
        changed = true;
      }
    }
  }
  const size_t count = Count(u1);
  if (count < options_.min_clients) {
    return Status::FailedPrecondition(
        "only " + std::to_string(count) + " of the " + std::to_string(Count(in_u1_)) +
        " clients that shared keys have at least " + std::to_string(threshold_) +
        " neighbours that did too, fewer than min_clients = " +
        std::to_string(options_.min_clients));
  }
  in_u1_ = std::move(u1);
  SecAggOutbox out;
  out.closed = SecAggStage::kShareKeys;
  out.recipients = Members(in_u1_);
  for (uint32_t v = 0; v < graph_->size(); ++v) {
    if (!in_u1_[v]) continue;
    ForwardedShares f;
    f.federation_id = options_.federation_id;
    f.round = options_.round;
    f.recipient = graph_->id(v);
    for (uint32_t u : graph_->Neighbours(v)) {
      if (!in_u1_[u]) continue;
      f.boxes.push_back({graph_->id(u), f.recipient, boxes_[u][*graph_->NeighbourRank(u, v)]});
    }
    out.forwarded_shares.push_back(std::move(f));
  }
  boxes_.clear();
  in_u2_.assign(graph_->size(), false);
  masked_sum_.assign(options_.vector_size, 0);
  stage_ = SecAggStage::kMaskedInput;
  return out;
}

Result<SecAggOutbox> SecAggServer::CloseMaskedInput() {
  const size_t u2 = Count(in_u2_);
  if (u2 < options_.min_clients) {
    return Status::FailedPrecondition("only " + std::to_string(u2) +
                                      " clients sent masked inputs, fewer than min_clients = " +
                                      std::to_string(options_.min_clients));
  }
  auto request = std::make_shared<UnmaskRequest>();
  request->federation_id = options_.federation_id;
  request->round = options_.round;
  request->survivors = Members(in_u2_);
  std::vector<bool> dropped(graph_->size());
  for (size_t i = 0; i < dropped.size(); ++i) dropped[i] = in_u1_[i] && !in_u2_[i];
  request->dropped = Members(dropped);

  SecAggOutbox out;
  out.closed = SecAggStage::kMaskedInput;
  out.recipients = request->survivors;
  out.unmask_request = request;
  unmasked_.assign(graph_->size(), false);
  shares_.assign(graph_->size(), {});
  stage_ = SecAggStage::kUnmasking;
  return out;
}

Result<SecAggOutbox> SecAggServer::CloseUnmasking() {
  // Which secrets are needed: b_u for u in U2; s_sk_u for u in U1 \ U2 with a neighbour in
  // U2 (otherwise no input carries a mask of u's). Check them all before rebuilding any.
  const uint32_t n = static_cast<uint32_t>(graph_->size());
  std::vector<bool> needed(n, false);
  std::string missing;
  size_t missing_count = 0;
  for (uint32_t u = 0; u < n; ++u) {
    if (!in_u1_[u]) continue;
    const std::span<const uint32_t> row = graph_->Neighbours(u);
    needed[u] = in_u2_[u] ||
                std::any_of(row.begin(), row.end(), [&](uint32_t v) { return bool(in_u2_[v]); });
    if (needed[u] && shares_[u].size() < threshold_) {
      if (++missing_count <= 5) {
        missing += (missing.empty() ? "" : ", ") + std::string("the ") +
                   std::string(SecretKindName(in_u2_[u] ? SecretKind::kSelfMaskSeed
                                                        : SecretKind::kMaskingKey)) +
                   " of " + Quoted(graph_->id(u)) + " (" + std::to_string(shares_[u].size()) +
                   " shares)";
      }
    }
  }
  if (missing_count > 0) {
    return Status::FailedPrecondition("cannot remove the masks: " + std::to_string(missing_count) +
                                      " secrets have fewer than the threshold of " +
                                      std::to_string(threshold_) + " shares: " + missing +
                                      (missing_count > 5 ? ", ..." : "") +
                                      "; the round cannot produce a sum");
  }

  std::vector<uint32_t> sum = masked_sum_;
  FM_ASSIGN_OR_RETURN(SecureBuffer seed, SecureBuffer::Create(kMaskSeedSize));
  for (uint32_t u = 0; u < n; ++u) {
    if (!needed[u]) continue;
    std::vector<ShamirShare> views;
    for (const CollectedShare& s : shares_[u]) views.push_back({s.x, s.y});
    FM_ASSIGN_OR_RETURN(SecureBuffer secret, ShamirCombine(views, threshold_));
    const std::span<const uint8_t, kSecAggSecretSize> key(secret.data(), kSecAggSecretSize);
    if (in_u2_[u]) {
      SubtractMask(key, sum);  // u's self-mask
      continue;
    }
    // u dropped after sharing keys: its rebuilt s_sk_u must be the key it advertised,
    // or some neighbour returned a bad share and the pairwise masks would come out wrong.
    CurveKey derived{};
    const AdvertiseKeys& keys_u = roster_->members[u];
    if (crypto_scalarmult_base(derived.data(), secret.data()) != 0 ||
        sodium_memcmp(derived.data(), keys_u.masking_public_key.data(), derived.size()) != 0) {
      return Status::Corruption("the shares of the masking key of " + Quoted(graph_->id(u)) +
                                " rebuild a key that does not match the one it advertised: "
                                "a neighbour returned a bad share");
    }
    for (uint32_t v : graph_->Neighbours(u)) {
      if (!in_u2_[v]) continue;
      FM_RETURN_IF_ERROR(PairwiseMaskSeedInto(secret.span(), roster_->members[v].masking_public_key,
                                              options_.round, graph_->id(u), graph_->id(v),
                                              seed.span().first<kMaskSeedSize>()));
      const std::span<const uint8_t, kMaskSeedSize> pair(seed.data(), kMaskSeedSize);
      // v added PRG(s_uv) if v < u and subtracted it otherwise; undo that.
      if (graph_->id(v) < graph_->id(u)) {
        SubtractMask(pair, sum);
      } else {
        AddMask(pair, sum);
      }
    }
  }

  SecAggOutbox out;
  out.closed = SecAggStage::kUnmasking;
  SecAggResult result;
  result.decoded_sum = DecodeFixedPointSum(sum, fixed_point_);
  result.sum = std::move(sum);
  result.contributors = Members(in_u2_);
  out.result = std::move(result);
  shares_.clear();
  masked_sum_.clear();
  stage_ = SecAggStage::kFinished;
  return out;
}

}  // namespace fedmesh
