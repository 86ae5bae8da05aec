#include "node/secagg_participant.h"

#include <algorithm>

#include "crypto/secagg/secagg_wire.h"

namespace fedmesh {

bool IsSecAggServerMessage(const wire::Body& body) {
  return std::holds_alternative<wire::SecAggRoster>(body) ||
         std::holds_alternative<wire::SecAggForwardedShares>(body) ||
         std::holds_alternative<wire::SecAggUnmaskRequest>(body);
}

Result<SecAggParticipant> SecAggParticipant::Start(const wire::Header& header,
                                                   const wire::FitTask& task,
                                                   const Identity& identity,
                                                   std::span<const PublicIdentity> allowlist,
                                                   std::vector<float> update) {
  FM_ASSIGN_OR_RETURN(SecAggOptions options, FromWire(header, task));
  if (update.size() != options.vector_size) {
    return Status::InvalidArgument("the update has " + std::to_string(update.size()) +
                                   " values but the task's model " +
                                   std::to_string(options.vector_size));
  }
  FM_ASSIGN_OR_RETURN(SecAggClient client, SecAggClient::Create(options, identity, allowlist));
  return SecAggParticipant(std::move(client), task.round, std::move(update));
}

Result<SecAggParticipant> SecAggParticipant::StartEncoded(const wire::Header& header,
                                                          const wire::FitTask& task,
                                                          const Identity& identity,
                                                          std::span<const PublicIdentity> allowlist,
                                                          std::vector<uint32_t> words) {
  FM_ASSIGN_OR_RETURN(SecAggOptions options, FromWire(header, task));
  if (words.size() != options.vector_size) {
    return Status::InvalidArgument("the encoded input has " + std::to_string(words.size()) +
                                   " words but the task sums " + std::to_string(options.vector_size));
  }
  FM_ASSIGN_OR_RETURN(SecAggClient client, SecAggClient::Create(options, identity, allowlist));
  SecAggParticipant p(std::move(client), task.round, {});
  p.encoded_ = std::move(words);
  return p;
}

wire::Body SecAggParticipant::advertisement() const { return ToWire(client_.advertisement()); }

Result<wire::Body> SecAggParticipant::OnMessage(const wire::Body& body) {
  if (const auto* m = std::get_if<wire::SecAggRoster>(&body)) {
    FM_ASSIGN_OR_RETURN(Roster roster, FromWire(*m));
    FM_ASSIGN_OR_RETURN(ShareKeys shares, client_.OnRoster(roster));
    return wire::Body(ToWire(shares));
  }
  if (const auto* m = std::get_if<wire::SecAggForwardedShares>(&body)) {
    FM_ASSIGN_OR_RETURN(ForwardedShares forwarded, FromWire(*m));
    FM_ASSIGN_OR_RETURN(MaskedInput masked,
                        encoded_.empty() ? client_.OnForwardedShares(forwarded, update_)
                                         : client_.OnForwardedSharesEncoded(forwarded, encoded_));
    std::fill(update_.begin(), update_.end(), 0.0f);
    std::fill(encoded_.begin(), encoded_.end(), 0u);
    return wire::Body(ToWire(masked));
  }
  if (const auto* m = std::get_if<wire::SecAggUnmaskRequest>(&body)) {
    FM_ASSIGN_OR_RETURN(UnmaskRequest request, FromWire(*m));
    FM_ASSIGN_OR_RETURN(UnmaskShares reveal, client_.OnUnmaskRequest(request));
    finished_ = true;
    return wire::Body(ToWire(reveal));
  }
  return Status::InvalidArgument("not a message the aggregator sends in secure aggregation");
}

}  // namespace fedmesh
