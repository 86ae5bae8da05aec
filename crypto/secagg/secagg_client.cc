#include "crypto/secagg/secagg_client.h"

#include <sodium.h>

#include <algorithm>
#include <set>
#include <utility>

#include "crypto/secagg/mask_prg.h"
#include "crypto/secagg/shamir.h"
#include "crypto/secagg/share_box.h"
#include "crypto/sodium.h"

namespace fedmesh {
namespace {

std::string Quoted(std::string_view id) { return QuotedId(id); }

// The 32-byte slot `i` of a buffer of per-neighbour keys or seeds.
std::span<uint8_t, 32> Slot(SecureBuffer& buffer, size_t i) {
  return std::span<uint8_t, 32>(buffer.data() + i * 32, 32);
}

std::span<const uint8_t, kSecAggSecretSize> Secret(const SecureBuffer& buffer, size_t slot) {
  return std::span<const uint8_t, kSecAggSecretSize>(buffer.data() + slot * kSecAggSecretSize,
                                                     kSecAggSecretSize);
}

}  // namespace

Result<SecAggClient> SecAggClient::Create(SecAggOptions options, const Identity& identity,
                                          std::span<const PublicIdentity> allowlist,
                                          std::unique_ptr<SecureRandom> rng) {
  FM_RETURN_IF_ERROR(options.Validate());
  FM_RETURN_IF_ERROR(InitSodium());
  SecAggClient client;
  for (const PublicIdentity& member : allowlist) {
    if (!client.allowlist_.emplace(member.name, member).second) {
      return Status::InvalidArgument("the secure aggregation allowlist names " +
                                     Quoted(member.name) + " twice");
    }
  }
  const auto self = client.allowlist_.find(identity.name());
  if (self == client.allowlist_.end()) {
    return Status::InvalidArgument("client " + Quoted(identity.name()) +
                                   " is not on the secure aggregation allowlist");
  }
  if (self->second.sign_public != identity.public_identity().sign_public) {
    return Status::PermissionDenied("the allowlist enrolls another signing key for " +
                                    Quoted(identity.name()) + "; this identity cannot take part");
  }
  client.fixed_point_ = options.fixed_point(allowlist.size());
  FM_RETURN_IF_ERROR(client.fixed_point_.Validate());
  client.options_ = std::move(options);
  client.rng_ = rng ? std::move(rng) : std::make_unique<SodiumRandom>();
  FM_ASSIGN_OR_RETURN(client.channel_, CurveKeyPair::Generate(*client.rng_));
  FM_ASSIGN_OR_RETURN(client.masking_, CurveKeyPair::Generate(*client.rng_));

  AdvertiseKeys& ad = client.advertisement_;
  ad.federation_id = client.options_.federation_id;
  ad.round = client.options_.round;
  ad.client_id = identity.name();
  ad.channel_public_key = client.channel_.public_key;
  ad.masking_public_key = client.masking_.public_key;
  FM_ASSIGN_OR_RETURN(ad.signature, identity.Sign(AdvertiseSignedBytes(
                                        ad.federation_id, ad.round, ad.client_id,
                                        ad.channel_public_key, ad.masking_public_key)));
  return client;
}

Status SecAggClient::CheckRoundOf(std::string_view what, std::string_view federation_id,
                                  uint64_t round) const {
  if (federation_id != options_.federation_id || round != options_.round) {
    return Status::InvalidArgument(
        std::string(what) + " is for federation " + Quoted(federation_id) + " round " +
        std::to_string(round) + "; this client is in federation " + Quoted(options_.federation_id) +
        " round " + std::to_string(options_.round));
  }
  return Status::OK();
}

Result<ShareKeys> SecAggClient::OnRoster(const Roster& roster) {
  if (stage_ != SecAggStage::kAdvertiseKeys) {
    return Status::FailedPrecondition("client " + Quoted(id()) +
                                      " has already accepted a roster for this round");
  }
  FM_RETURN_IF_ERROR(CheckRoundOf("the roster", roster.federation_id, roster.round));

  std::vector<std::string> ids;
  std::set<std::string_view> seen;
  for (const AdvertiseKeys& m : roster.members) {
    FM_RETURN_IF_ERROR(
        CheckRoundOf("the roster entry of " + Quoted(m.client_id), m.federation_id, m.round));
    const auto enrolled = allowlist_.find(m.client_id);
    if (enrolled == allowlist_.end()) {
      return Status::PermissionDenied("roster member " + Quoted(m.client_id) +
                                      " is not on this client's allowlist");
    }
    if (!seen.insert(m.client_id).second) {
      return Status::InvalidArgument("the roster lists " + Quoted(m.client_id) + " twice");
    }
    // Signed bytes from our own federation and round, so a signature from another round
    // cannot be replayed into this one.
    const std::vector<uint8_t> signed_bytes =
        AdvertiseSignedBytes(options_.federation_id, options_.round, m.client_id,
                             m.channel_public_key, m.masking_public_key);
    if (!VerifySignature(enrolled->second, signed_bytes, m.signature)) {
      return Status::PermissionDenied("the key signature of roster member " + Quoted(m.client_id) +
                                      " does not verify against its enrolled identity");
    }
    ids.push_back(m.client_id);
  }
  const auto me = std::find_if(roster.members.begin(), roster.members.end(),
                               [&](const AdvertiseKeys& m) { return m.client_id == id(); });
  if (me == roster.members.end()) {
    return Status::FailedPrecondition("the roster leaves out this client " + Quoted(id()));
  }
  if (me->channel_public_key != channel_.public_key ||
      me->masking_public_key != masking_.public_key) {
    return Status::PermissionDenied("the roster carries other keys than this client's under " +
                                    Quoted(id()));
  }
  FM_ASSIGN_OR_RETURN(SecAggGraphParameters params,
                      ResolveGraphParameters(options_, roster.members.size()));
  FM_ASSIGN_OR_RETURN(SecAggGraph graph,
                      SecAggGraph::Build(std::move(ids), params.degree, roster.graph_seed));
  const uint32_t my_index = *graph.IndexOf(id());
  const std::span<const uint32_t> row = graph.Neighbours(my_index);
  // Roster members by graph index (the graph sorts ids).
  std::vector<const AdvertiseKeys*> by_index(graph.size());
  for (const AdvertiseKeys& m : roster.members) by_index[*graph.IndexOf(m.client_id)] = &m;

  // Everything below is computed into locals and committed at the end, so a refusal
  // (a low-order key) leaves the client as it was.
  std::vector<Neighbour> neighbours(row.size());
  FM_ASSIGN_OR_RETURN(SecureBuffer box_keys, SecureBuffer::Create(row.size() * 32));
  FM_ASSIGN_OR_RETURN(SecureBuffer pair_seeds, SecureBuffer::Create(row.size() * kMaskSeedSize));
  for (size_t r = 0; r < row.size(); ++r) {
    const AdvertiseKeys& v = *by_index[row[r]];
    neighbours[r].index = row[r];
    neighbours[r].my_x = static_cast<uint8_t>(*graph.NeighbourRank(row[r], my_index) + 1);
    FM_RETURN_IF_ERROR(ShareBoxKeyInto(channel_.secret_key.span(), v.channel_public_key,
                                       v.client_id, Slot(box_keys, r)));
    FM_RETURN_IF_ERROR(PairwiseMaskSeedInto(masking_.secret_key.span(), v.masking_public_key,
                                            options_.round, id(), v.client_id,
                                            Slot(pair_seeds, r)));
  }

  FM_ASSIGN_OR_RETURN(SecureBuffer self_mask_seed, SecureBuffer::Create(kSecAggSecretSize));
  rng_->Fill(self_mask_seed.span());
  const uint32_t k = static_cast<uint32_t>(row.size());
  FM_ASSIGN_OR_RETURN(ShamirShares b_shares,
                      ShamirSplit(self_mask_seed.span(), params.threshold, k, *rng_));
  FM_ASSIGN_OR_RETURN(ShamirShares key_shares,
                      ShamirSplit(masking_.secret_key.span(), params.threshold, k, *rng_));

  ShareKeys reply;
  reply.federation_id = options_.federation_id;
  reply.round = options_.round;
  reply.client_id = id();
  FM_ASSIGN_OR_RETURN(SecureBuffer plaintext, SecureBuffer::Create(kShareBoxPlaintextSize));
  for (size_t r = 0; r < row.size(); ++r) {
    const std::string& to = graph.id(row[r]);
    // Share r (x = r + 1) of each secret goes to the neighbour of rank r.
    std::copy(b_shares[r].y.begin(), b_shares[r].y.end(), plaintext.data());
    std::copy(key_shares[r].y.begin(), key_shares[r].y.end(), plaintext.data() + kSecAggSecretSize);
    const ShareBoxContext context{options_.federation_id, options_.round, id(), to};
    reply.boxes.push_back(
        {id(), to, SealShareBox(Slot(box_keys, r), plaintext.span(), context, *rng_)});
  }

  graph_ = std::move(graph);
  my_index_ = my_index;
  threshold_ = params.threshold;
  neighbours_ = std::move(neighbours);
  box_keys_ = std::move(box_keys);
  pair_seeds_ = std::move(pair_seeds);
  self_mask_seed_ = std::move(self_mask_seed);
  // Both secret keys have done their work: the box keys and pairwise seeds are derived,
  // and s_sk_u's shares are sealed.
  channel_.secret_key = SecureBuffer();
  masking_.secret_key = SecureBuffer();
  stage_ = SecAggStage::kShareKeys;
  return reply;
}

Result<MaskedInput> SecAggClient::OnForwardedShares(const ForwardedShares& shares,
                                                    std::span<const float> update) {
  if (stage_ != SecAggStage::kShareKeys) {
    return Status::FailedPrecondition("client " + Quoted(id()) +
                                      " is not waiting for shares (stage " +
                                      std::string(SecAggStageName(stage_)) + ")");
  }
  if (update.size() != options_.vector_size) {
    return Status::InvalidArgument("the update has " + std::to_string(update.size()) +
                                   " coordinates; this round aggregates " +
                                   std::to_string(options_.vector_size));
  }
  FM_ASSIGN_OR_RETURN(std::vector<uint32_t> encoded, EncodeFixedPoint(update, fixed_point_));
  if (fixed_point_.noise_stddev > 0) {
    // Distributed DP: the noise is keyed from this client's secure random source, so the
    // server cannot subtract it.
    std::array<uint8_t, 32> key{};
    rng_->Fill(key);
    auto noise = GaussianNoise::FromKey(key);
    sodium_memzero(key.data(), key.size());
    if (!noise.ok()) return noise.status();
    AddEncodedNoise(encoded, fixed_point_, *noise);
  }
  Result<MaskedInput> masked = MaskInput(shares, encoded);
  sodium_memzero(encoded.data(), encoded.size() * sizeof(uint32_t));  // the unmasked input
  return masked;
}

Result<MaskedInput> SecAggClient::OnForwardedSharesEncoded(const ForwardedShares& shares,
                                                           std::span<const uint32_t> encoded) {
  if (stage_ != SecAggStage::kShareKeys) {
    return Status::FailedPrecondition("client " + Quoted(id()) +
                                      " is not waiting for shares (stage " +
                                      std::string(SecAggStageName(stage_)) + ")");
  }
  return MaskInput(shares, encoded);
}

Result<MaskedInput> SecAggClient::MaskInput(const ForwardedShares& shares,
                                            std::span<const uint32_t> encoded) {
  FM_RETURN_IF_ERROR(CheckRoundOf("the forwarded shares", shares.federation_id, shares.round));
  if (shares.recipient != id()) {
    return Status::InvalidArgument("the forwarded shares are addressed to " +
                                   Quoted(shares.recipient) + ", not to this client " +
                                   Quoted(id()));
  }
  if (encoded.size() != options_.vector_size) {
    return Status::InvalidArgument("the encoded update has " + std::to_string(encoded.size()) +
                                   " words; this round aggregates " +
                                   std::to_string(options_.vector_size));
  }
  const std::span<const uint32_t> row = graph_->Neighbours(my_index_);
  std::vector<bool> in_u1(row.size(), false);
  FM_ASSIGN_OR_RETURN(SecureBuffer held, SecureBuffer::Create(row.size() * kShareBoxPlaintextSize));
  for (const SealedShares& box : shares.boxes) {
    if (box.to != id()) {
      return Status::InvalidArgument("a forwarded box from " + Quoted(box.from) +
                                     " is addressed to " + Quoted(box.to) + ", not to " +
                                     Quoted(id()));
    }
    const std::optional<uint32_t> from = graph_->IndexOf(box.from);
    const std::optional<uint32_t> rank =
        from ? graph_->NeighbourRank(my_index_, *from) : std::nullopt;
    if (!rank) {
      return Status::InvalidArgument("a forwarded box comes from " + Quoted(box.from) +
                                     ", who is not a graph neighbour of " + Quoted(id()));
    }
    if (in_u1[*rank]) {
      return Status::InvalidArgument("the forwarded shares hold two boxes from " +
                                     Quoted(box.from));
    }
    const ShareBoxContext context{options_.federation_id, options_.round, box.from, id()};
    FM_RETURN_IF_ERROR(OpenShareBoxInto(
        Slot(box_keys_, *rank), box.box, context,
        held.span().subspan(*rank * kShareBoxPlaintextSize, kShareBoxPlaintextSize)));
    in_u1[*rank] = true;
  }
  const size_t senders = static_cast<size_t>(std::count(in_u1.begin(), in_u1.end(), true));
  if (senders < threshold_) {
    return Status::FailedPrecondition("only " + std::to_string(senders) + " of the " +
                                      std::to_string(row.size()) + " neighbours of " +
                                      Quoted(id()) + " shared keys, fewer than the threshold " +
                                      std::to_string(threshold_) +
                                      ": its masks could never be removed, so it keeps its "
                                      "input to itself");
  }

  MaskedInput reply;
  reply.federation_id = options_.federation_id;
  reply.round = options_.round;
  reply.client_id = id();
  reply.masked.assign(encoded.begin(), encoded.end());
  AddMask(Secret(self_mask_seed_, 0), reply.masked);
  for (size_t r = 0; r < row.size(); ++r) {
    if (!in_u1[r]) continue;
    // u < v adds PRG(s_uv) and v subtracts it, so the pair cancels in the sum.
    if (id() < graph_->id(row[r])) {
      AddMask(Secret(pair_seeds_, r), reply.masked);
    } else {
      SubtractMask(Secret(pair_seeds_, r), reply.masked);
    }
  }

  for (size_t r = 0; r < row.size(); ++r) neighbours_[r].in_u1 = in_u1[r];
  held_shares_ = std::move(held);
  // Nothing later needs these: b_u and s_sk_u now exist only as neighbours' shares.
  self_mask_seed_ = SecureBuffer();
  pair_seeds_ = SecureBuffer();
  box_keys_ = SecureBuffer();
  stage_ = SecAggStage::kMaskedInput;
  return reply;
}

Result<UnmaskShares> SecAggClient::OnUnmaskRequest(const UnmaskRequest& request) {
  if (stage_ != SecAggStage::kMaskedInput) {
    return Status::FailedPrecondition("client " + Quoted(id()) +
                                      " is not waiting for an unmask request (stage " +
                                      std::string(SecAggStageName(stage_)) + ")");
  }
  FM_RETURN_IF_ERROR(CheckRoundOf("the unmask request", request.federation_id, request.round));
  // 0: not listed, 1: survivor, 2: dropped; by graph index.
  std::vector<uint8_t> listed(graph_->size(), 0);
  for (const auto& [names, mark] :
       {std::pair{&request.survivors, uint8_t{1}}, std::pair{&request.dropped, uint8_t{2}}}) {
    for (const std::string& name : *names) {
      const std::optional<uint32_t> index = graph_->IndexOf(name);
      if (!index) {
        return Status::InvalidArgument("the unmask request names " + Quoted(name) +
                                       ", who is not in this round's roster");
      }
      if (listed[*index] == mark) {
        return Status::InvalidArgument("the unmask request lists " + Quoted(name) + " twice");
      }
      if (listed[*index] != 0) {
        return Status::FailedPrecondition(
            "the unmask request lists " + Quoted(name) +
            " as both a survivor and dropped; revealing shares of both its self-mask seed and "
            "its masking key would expose its input, so this client refuses");
      }
      listed[*index] = mark;
    }
  }
  if (listed[my_index_] != 1) {
    return Status::FailedPrecondition("the unmask request does not list this client " +
                                      Quoted(id()) + " as a survivor");
  }
  if (request.survivors.size() < options_.min_clients) {
    return Status::FailedPrecondition(
        "the unmask request lists " + std::to_string(request.survivors.size()) +
        " survivors, fewer than min_clients = " + std::to_string(options_.min_clients) +
        "; a sum of so few inputs would say too much about each");
  }

  UnmaskShares reply;
  reply.federation_id = options_.federation_id;
  reply.round = options_.round;
  reply.client_id = id();
  for (size_t r = 0; r < neighbours_.size(); ++r) {
    const Neighbour& n = neighbours_[r];
    const uint8_t mark = listed[n.index];
    if (mark == 0) continue;
    if (!n.in_u1) {
      return Status::InvalidArgument(
          "the unmask request lists neighbour " + Quoted(graph_->id(n.index)) +
          (mark == 1 ? " as a survivor" : " as dropped") +
          ", but it never sent this client its shares, so it cannot have shared keys");
    }
    RevealedShare share;
    share.owner = graph_->id(n.index);
    share.kind = mark == 1 ? SecretKind::kSelfMaskSeed : SecretKind::kMaskingKey;
    share.x = n.my_x;
    const uint8_t* slot =
        held_shares_.data() + r * kShareBoxPlaintextSize + (mark == 1 ? 0 : kSecAggSecretSize);
    share.y.assign(slot, slot + kSecAggSecretSize);
    reply.shares.push_back(std::move(share));
  }
  held_shares_ = SecureBuffer();
  stage_ = SecAggStage::kFinished;
  return reply;
}

}  // namespace fedmesh
