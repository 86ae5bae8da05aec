#include "aggregator/secagg_round.h"

#include <algorithm>

#include "crypto/secagg/secagg_wire.h"

namespace fedmesh {
namespace {

// A node's message must name the authenticated peer as its sender: the transport's id, not
// the message's, is the one the allowlist vouches for.
Status CheckSender(const std::string& from, const std::string& claimed) {
  if (claimed == from) return Status::OK();
  return Status::PermissionDenied("secagg message names client \"" + claimed +
                                  "\" but comes from \"" + from + "\"");
}

}  // namespace

Result<SecAggRound> SecAggRound::Open(const SecAggSettings& settings, std::string federation_id,
                                      uint64_t round, size_t vector_size, size_t min_clients,
                                      std::span<const std::string> selected) {
  SecAggOptions o;
  o.federation_id = std::move(federation_id);
  o.round = round;
  o.threshold = settings.threshold;
  o.neighbours = settings.neighbours;
  o.clip = settings.clip;
  o.bits = settings.bits;
  o.noise_stddev = settings.noise_stddev;
  o.vector_size = vector_size;
  o.min_clients = std::max<size_t>(min_clients, 2);
  std::vector<PublicIdentity> members;
  for (const PublicIdentity& p : settings.allowlist) {
    if (std::find(selected.begin(), selected.end(), p.name) != selected.end()) members.push_back(p);
  }
  // The overflow bound covers everyone who could be selected, so a node decodes alike
  // whatever the size of this round's selection.
  o.max_clients = std::max<uint64_t>(settings.allowlist.size(), members.size());
  FM_ASSIGN_OR_RETURN(SecAggServer server, SecAggServer::Create(o, members));
  return SecAggRound(std::move(server), ToWire(o, members.size()));
}

Status SecAggRound::OnMessage(const std::string& from, const wire::Body& body) {
  if (const auto* m = std::get_if<wire::SecAggAdvertiseKeys>(&body)) {
    FM_RETURN_IF_ERROR(CheckSender(from, m->client_id));
    FM_ASSIGN_OR_RETURN(AdvertiseKeys msg, FromWire(*m));
    return server_.OnAdvertise(msg);
  }
  if (const auto* m = std::get_if<wire::SecAggShareKeys>(&body)) {
    FM_RETURN_IF_ERROR(CheckSender(from, m->client_id));
    FM_ASSIGN_OR_RETURN(ShareKeys msg, FromWire(*m));
    return server_.OnShares(msg);
  }
  if (const auto* m = std::get_if<wire::SecAggMaskedInput>(&body)) {
    FM_RETURN_IF_ERROR(CheckSender(from, m->client_id));
    FM_ASSIGN_OR_RETURN(MaskedInput msg, FromWire(*m));
    FM_RETURN_IF_ERROR(server_.OnMaskedInput(msg));
    masked_bytes_ += m->masked.bytes.size();
    if (m->record_privacy) record_privacy_[from] = *m->record_privacy;
    return Status::OK();
  }
  if (const auto* m = std::get_if<wire::SecAggUnmaskShares>(&body)) {
    FM_RETURN_IF_ERROR(CheckSender(from, m->client_id));
    FM_ASSIGN_OR_RETURN(UnmaskShares msg, FromWire(*m));
    return server_.OnUnmaskShares(msg);
  }
  return Status::InvalidArgument("not a message a node sends in secure aggregation");
}

Result<SecAggRound::Step> SecAggRound::Close() {
  FM_ASSIGN_OR_RETURN(SecAggOutbox box, server_.CloseStage());
  Step step;
  step.closed = box.closed;
  if (box.roster) {
    const wire::SecAggRoster roster = ToWire(*box.roster);
    for (const std::string& to : box.recipients) step.sends.emplace_back(to, roster);
  }
  for (const ForwardedShares& f : box.forwarded_shares) {
    step.sends.emplace_back(f.recipient, ToWire(f));
  }
  if (box.unmask_request) {
    const wire::SecAggUnmaskRequest request = ToWire(*box.unmask_request);
    for (const std::string& to : box.recipients) step.sends.emplace_back(to, request);
  }
  step.result = std::move(box.result);
  return step;
}

}  // namespace fedmesh
