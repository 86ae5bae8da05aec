#include "node/secagg_participant.h"

#include <algorithm>

#include "crypto/secagg/secagg_graph.h"
#include "crypto/secagg/secagg_wire.h"

namespace fedmesh {

Status CheckSecAggFloors(const SecAggOptions& options, const SecAggFloors& floors) {
  auto refuse = [](const std::string& what, const std::string& asked, const std::string& floor,
                   const char* key) {
    return Status::FailedPrecondition("the task's secure aggregation " + what + " is " + asked +
                                      ", below this site's [secagg] " + key + " (" + floor +
                                      "): refused");
  };
  if (options.min_clients < floors.min_clients) {
    return refuse("min_clients", std::to_string(options.min_clients),
                  std::to_string(floors.min_clients), "min_clients");
  }
  // The smallest roster the task allows gives the lowest threshold it can end up with.
  const size_t n = std::max<size_t>(options.min_clients, 2);
  const uint32_t degree = options.neighbours != 0 ? options.neighbours : DefaultSecAggNeighbours(n);
  const uint32_t actual = static_cast<uint32_t>(std::min<size_t>(degree, n - 1));
  const uint32_t lowest = options.threshold != 0 ? options.threshold : DefaultSecAggThreshold(actual);
  if (lowest < floors.min_threshold) {
    return refuse("threshold (lowest over the rosters it allows)", std::to_string(lowest),
                  std::to_string(floors.min_threshold), "min_threshold");
  }
  if (!(options.noise_stddev >= floors.min_noise_stddev)) {
    return refuse("noise_stddev", std::to_string(options.noise_stddev),
                  std::to_string(floors.min_noise_stddev), "min_noise_stddev");
  }
  return Status::OK();
}

bool IsSecAggServerMessage(const wire::Body& body) {
  return std::holds_alternative<wire::SecAggRoster>(body) ||
         std::holds_alternative<wire::SecAggForwardedShares>(body) ||
         std::holds_alternative<wire::SecAggUnmaskRequest>(body);
}

Result<SecAggParticipant> SecAggParticipant::Start(const wire::Header& header,
                                                   const wire::FitTask& task,
                                                   const Identity& identity,
                                                   std::span<const PublicIdentity> allowlist,
                                                   std::vector<float> update,
                                                   const SecAggFloors& floors,
                                                   MaskLedger* ledger) {
  FM_ASSIGN_OR_RETURN(SecAggOptions options, FromWire(header, task));
  FM_RETURN_IF_ERROR(CheckSecAggFloors(options, floors));
  if (update.size() != options.vector_size) {
    return Status::InvalidArgument("the update has " + std::to_string(update.size()) +
                                   " values but the task's model " +
                                   std::to_string(options.vector_size));
  }
  FM_ASSIGN_OR_RETURN(SecAggClient client, SecAggClient::Create(options, identity, allowlist));
  return SecAggParticipant(std::move(client), task.round, std::move(update), ledger);
}

Result<SecAggParticipant> SecAggParticipant::StartEncoded(const wire::Header& header,
                                                          const wire::FitTask& task,
                                                          const Identity& identity,
                                                          std::span<const PublicIdentity> allowlist,
                                                          std::vector<uint32_t> words,
                                                          const SecAggFloors& floors,
                                                          MaskLedger* ledger) {
  FM_ASSIGN_OR_RETURN(SecAggOptions options, FromWire(header, task));
  // Statistics sums are exact by design (their privacy is the site's [stats] policy): the
  // noise floor is for model updates only.
  SecAggFloors sums_floors = floors;
  sums_floors.min_noise_stddev = 0.0;
  FM_RETURN_IF_ERROR(CheckSecAggFloors(options, sums_floors));
  if (words.size() != options.vector_size) {
    return Status::InvalidArgument("the encoded input has " + std::to_string(words.size()) +
                                   " words but the task sums " + std::to_string(options.vector_size));
  }
  FM_ASSIGN_OR_RETURN(SecAggClient client, SecAggClient::Create(options, identity, allowlist));
  SecAggParticipant p(std::move(client), task.round, {}, ledger);
  p.encoded_ = std::move(words);
  p.encoded_input_ = true;
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
    const std::pair<uint64_t, bool> slot{round_, encoded_input_};
    if (ledger_ != nullptr && ledger_->contains(slot)) {
      return Status::FailedPrecondition("this site already sent a masked input for round " +
                                        std::to_string(round_) +
                                        "; masking another would let two sums be compared");
    }
    FM_ASSIGN_OR_RETURN(ForwardedShares forwarded, FromWire(*m));
    FM_ASSIGN_OR_RETURN(MaskedInput masked,
                        encoded_.empty() ? client_.OnForwardedShares(forwarded, update_)
                                         : client_.OnForwardedSharesEncoded(forwarded, encoded_));
    std::fill(update_.begin(), update_.end(), 0.0f);
    std::fill(encoded_.begin(), encoded_.end(), 0u);
    if (ledger_ != nullptr) ledger_->insert(slot);
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
