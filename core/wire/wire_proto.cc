// Messages <-> their protobuf envelope (fedmesh.proto): the field-by-field conversion Encode
// and the Reassembler use. Checks stay in wire_codec.cc, so a message is checked the same
// whichever way it goes.
#include "core/wire/wire_proto.h"

#include <array>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/wire/wire_internal.h"
#include "core/wire/wire_stats.h"

namespace fedmesh::wire {

void ToProto(const Header& h, uint32_t type, pb::Header* out) {
  out->set_protocol_version(kProtocolVersion);
  out->set_federation_id(h.federation_id);
  out->set_sender_id(h.sender_id);
  out->set_round(h.round);
  out->set_model_version(h.model_version);
  out->set_type(static_cast<pb::MessageType>(type));
  out->set_message_id(h.message_id);
}

Header FromProto(const pb::Header& h) {
  Header out;
  out.federation_id = h.federation_id();
  out.sender_id = h.sender_id();
  out.round = h.round();
  out.model_version = h.model_version();
  out.message_id = h.message_id();
  return out;
}


namespace {

void ToProto(const TensorPayload& p, const Framing& f, pb::TensorPayload* out) {
  out->set_codec(p.codec);
  out->set_dtype(static_cast<pb::DType>(p.dtype));
  out->set_element_count(p.element_count);
  for (const auto& dims : p.shapes) {
    auto* s = out->add_shapes();
    for (uint64_t d : dims) s->add_dims(d);
  }
  out->set_payload_bytes(f.payload_bytes);
  out->set_chunk_bytes(f.chunk_bytes);
  out->set_chunk_count(f.chunk_count);
  if (f.digest.kind == DigestKind::kSha256) {
    out->set_sha256(f.digest.bytes.data(), f.digest.bytes.size());
  } else {
    out->set_blake3(f.digest.bytes.data(), f.digest.bytes.size());
  }
}

// Copies the description (not the bytes, which come in chunks). Counts that decide how
// much is copied are checked first.
Status FromProto(const pb::TensorPayload& p, std::string_view what, const WireLimits& l,
                 TensorPayload* out, Framing* framing) {
  if (static_cast<size_t>(p.shapes_size()) > l.max_tensors) {
    return Status::OutOfRange(StrCat(what, " lists ", p.shapes_size(), " tensors; the limit is ",
                                     l.max_tensors, " (max_tensors)"));
  }
  for (int t = 0; t < p.shapes_size(); ++t) {
    if (static_cast<size_t>(p.shapes(t).dims_size()) > l.max_dims) {
      return Status::OutOfRange(StrCat(what, " tensor ", t, " has ", p.shapes(t).dims_size(),
                                       " dims; the limit is ", l.max_dims, " (max_dims)"));
    }
  }
  // Exactly one digest, of 32 bytes.
  const bool sha256 = !p.sha256().empty(), blake3 = !p.blake3().empty();
  if (sha256 == blake3) {
    return Status::Corruption(StrCat(what, sha256 ? " carries both a sha256 and a blake3 digest"
                                                  : " carries no digest (sha256 or blake3)",
                                     "; exactly one is required"));
  }
  const std::string& declared = sha256 ? p.sha256() : p.blake3();
  if (declared.size() != framing->digest.bytes.size()) {
    return Status::Corruption(StrCat(what, " ", sha256 ? "sha256" : "blake3", " is ",
                                     declared.size(), " bytes; the digest is 32"));
  }
  out->codec = p.codec();
  out->dtype = static_cast<DType>(p.dtype());
  out->element_count = p.element_count();
  out->shapes.resize(p.shapes_size());
  for (int t = 0; t < p.shapes_size(); ++t) {
    out->shapes[t].assign(p.shapes(t).dims().begin(), p.shapes(t).dims().end());
  }
  framing->payload_bytes = p.payload_bytes();
  framing->chunk_bytes = p.chunk_bytes();
  framing->chunk_count = p.chunk_count();
  framing->digest.kind = sha256 ? DigestKind::kSha256 : DigestKind::kBlake3;
  std::memcpy(framing->digest.bytes.data(), declared.data(), framing->digest.bytes.size());
  return Status::OK();
}

void ToProto(const RecordPrivacyReport& r, pb::RecordPrivacyReport* out) {
  out->set_epsilon(r.epsilon);
  out->set_delta(r.delta);
  out->set_steps(r.steps);
}

RecordPrivacyReport FromProto(const pb::RecordPrivacyReport& r) {
  return {r.epsilon(), r.delta(), r.steps()};
}

void SealedSharesToProto(const std::vector<SecAggSealedShares>& boxes,
                         google::protobuf::RepeatedPtrField<pb::SecAggSealedShares>* out) {
  out->Reserve(static_cast<int>(boxes.size()));
  for (const SecAggSealedShares& b : boxes) {
    auto* o = out->Add();
    o->set_sender(b.sender);
    o->set_recipient(b.recipient);
    o->set_box(b.box.data(), b.box.size());
  }
}

// Copies sealed boxes, each checked for its length first. The count is checked by the
// caller.
Status SealedSharesFromProto(std::string_view type,
                             const google::protobuf::RepeatedPtrField<pb::SecAggSealedShares>& in,
                             std::vector<SecAggSealedShares>* out) {
  out->reserve(static_cast<size_t>(in.size()));
  for (int i = 0; i < in.size(); ++i) {
    const pb::SecAggSealedShares& b = in.Get(i);
    FM_RETURN_IF_ERROR(CheckExactBytes(b.box().size(), kSecAggShareBoxBytes,
                                       StrCat(type, " box ", i), "a sealed pair of shares"));
    out->push_back({b.sender(), b.recipient(), {b.box().begin(), b.box().end()}});
  }
  return Status::OK();
}

// Copies a key of exactly N bytes (checked by the caller).
template <size_t N>
void CopyKey(const std::string& in, std::array<uint8_t, N>* out) {
  FM_CHECK_EQ(in.size(), N);
  std::memcpy(out->data(), in.data(), N);
}

}  // namespace

// Fills the envelope body of `body`; its payload, if any, is described by `framing`.
void BodyToProto(const Body& body, const Framing& framing, pb::Envelope* env) {
  if (const auto* m = std::get_if<Register>(&body)) {
    auto* o = env->mutable_registration();
    o->set_node_id(m->node_id);
    o->set_num_examples(m->num_examples);
    for (const auto& c : m->capabilities) o->add_capabilities(c);
  } else if (const auto* m = std::get_if<RegisterAck>(&body)) {
    auto* o = env->mutable_register_ack();
    o->set_node_id(m->node_id);
    o->set_heartbeat_interval_ms(m->heartbeat_interval_ms);
  } else if (const auto* m = std::get_if<FitTask>(&body)) {
    auto* o = env->mutable_fit_task();
    o->set_round(m->round);
    ToProto(m->global_model, framing, o->mutable_global_model());
    o->set_local_epochs(m->local_epochs);
    o->set_batch_size(m->batch_size);
    o->set_learning_rate(m->learning_rate);
    o->set_momentum(m->momentum);
    o->set_prox_mu(m->prox_mu);
    o->set_deadline_unix_ms(m->deadline_unix_ms);
    o->set_update_codec(m->update_codec);
    o->set_with_prediction(m->with_prediction);
    o->set_model_sha256(m->model_sha256);
    o->set_model_graph(m->model_graph);
    o->set_loss(m->loss);
    for (float w : m->class_weights) o->add_class_weights(w);
    o->set_pos_weight(m->pos_weight);
    o->set_evaluate_only(m->evaluate_only);
    o->set_finetune_epochs(m->finetune_epochs);
    o->set_local_only_epochs(m->local_only_epochs);
    o->set_candidate(m->candidate);
    o->set_collect_local_models(m->collect_local_models);
    for (double v : m->impute_values) o->add_impute_values(v);
    o->set_chunk_data_parts(m->chunk_data_parts);
    if (m->statistics.has_value()) ToProto(*m->statistics, o->mutable_statistics());
    if (m->secagg.has_value()) {
      const SecAggParameters& p = *m->secagg;
      auto* os = o->mutable_secagg();
      os->set_threshold(p.threshold);
      os->set_neighbours(p.neighbours);
      os->set_clip(p.clip);
      os->set_bits(p.bits);
      os->set_min_clients(p.min_clients);
      os->set_max_clients(p.max_clients);
      os->set_noise_stddev(p.noise_stddev);
    }
  } else if (const auto* m = std::get_if<FitResult>(&body)) {
    auto* o = env->mutable_fit_result();
    o->set_round(m->round);
    o->set_num_examples(m->num_examples);
    o->set_train_loss(m->train_loss);
    ToProto(m->update, framing, o->mutable_update());
    o->set_bytes_before_codec(m->bytes_before_codec);
    o->set_bytes_after_codec(m->bytes_after_codec);
    o->set_applied_prediction(m->applied_prediction);
    o->set_evaluation(m->evaluation);
    for (const auto& [name, value] : m->metrics) (*o->mutable_metrics())[name] = value;
    if (m->statistics.has_value()) ToProto(*m->statistics, o->mutable_statistics());
    o->set_local_model(m->local_model);
    o->set_signature(m->signature.data(), m->signature.size());
    if (m->record_privacy) ToProto(*m->record_privacy, o->mutable_record_privacy());
  } else if (const auto* m = std::get_if<Heartbeat>(&body)) {
    env->mutable_heartbeat()->set_sequence(m->sequence);
  } else if (const auto* m = std::get_if<Membership>(&body)) {
    auto* o = env->mutable_membership();
    o->set_kind(static_cast<pb::MembershipKind>(m->kind));
    o->set_probe_id(m->probe_id);
    o->set_target(m->target);
    for (const MemberUpdate& u : m->updates) {
      auto* ou = o->add_updates();
      ou->set_id(u.id);
      ou->set_endpoint(u.endpoint);
      ou->set_curve_public(u.curve_public.data(), u.curve_public.size());
      ou->set_sign_public(u.sign_public.data(), u.sign_public.size());
      ou->set_incarnation(u.incarnation);
      ou->set_state(static_cast<pb::MemberState>(u.state));
      ou->set_signature(u.signature.data(), u.signature.size());
    }
  } else if (const auto* m = std::get_if<GossipModel>(&body)) {
    auto* o = env->mutable_gossip_model();
    o->set_kind(static_cast<pb::GossipKind>(m->kind));
    o->set_sequence(m->sequence);
    o->set_step(m->step);
    o->set_weight(m->weight);
    ToProto(m->model, framing, o->mutable_model());
    o->set_signature(m->signature.data(), m->signature.size());
    o->set_model_sha256(m->model_sha256);
  } else if (const auto* m = std::get_if<SecAggAdvertiseKeys>(&body)) {
    auto* o = env->mutable_secagg_advertise_keys();
    o->set_federation_id(m->federation_id);
    o->set_round(m->round);
    o->set_client_id(m->client_id);
    o->set_channel_public_key(m->channel_public_key.data(), m->channel_public_key.size());
    o->set_masking_public_key(m->masking_public_key.data(), m->masking_public_key.size());
    o->set_signature(m->signature.data(), m->signature.size());
  } else if (const auto* m = std::get_if<SecAggRoster>(&body)) {
    auto* o = env->mutable_secagg_roster();
    o->set_federation_id(m->federation_id);
    o->set_round(m->round);
    o->mutable_members()->Reserve(static_cast<int>(m->members.size()));
    for (const SecAggRosterMember& k : m->members) {
      auto* ok = o->add_members();
      ok->set_client_id(k.client_id);
      ok->set_channel_public_key(k.channel_public_key.data(), k.channel_public_key.size());
      ok->set_masking_public_key(k.masking_public_key.data(), k.masking_public_key.size());
      ok->set_signature(k.signature.data(), k.signature.size());
    }
    o->set_graph_seed(m->graph_seed.data(), m->graph_seed.size());
  } else if (const auto* m = std::get_if<SecAggShareKeys>(&body)) {
    auto* o = env->mutable_secagg_share_keys();
    o->set_federation_id(m->federation_id);
    o->set_round(m->round);
    o->set_client_id(m->client_id);
    SealedSharesToProto(m->boxes, o->mutable_boxes());
  } else if (const auto* m = std::get_if<SecAggForwardedShares>(&body)) {
    auto* o = env->mutable_secagg_forwarded_shares();
    o->set_federation_id(m->federation_id);
    o->set_round(m->round);
    o->set_recipient(m->recipient);
    SealedSharesToProto(m->boxes, o->mutable_boxes());
  } else if (const auto* m = std::get_if<SecAggMaskedInput>(&body)) {
    auto* o = env->mutable_secagg_masked_input();
    o->set_federation_id(m->federation_id);
    o->set_round(m->round);
    o->set_client_id(m->client_id);
    ToProto(m->masked, framing, o->mutable_masked());
    if (m->record_privacy) ToProto(*m->record_privacy, o->mutable_record_privacy());
  } else if (const auto* m = std::get_if<SecAggUnmaskRequest>(&body)) {
    auto* o = env->mutable_secagg_unmask_request();
    o->set_federation_id(m->federation_id);
    o->set_round(m->round);
    for (const std::string& id : m->survivors) o->add_survivors(id);
    for (const std::string& id : m->dropped) o->add_dropped(id);
  } else if (const auto* m = std::get_if<SecAggUnmaskShares>(&body)) {
    auto* o = env->mutable_secagg_unmask_shares();
    o->set_federation_id(m->federation_id);
    o->set_round(m->round);
    o->set_client_id(m->client_id);
    o->mutable_shares()->Reserve(static_cast<int>(m->shares.size()));
    for (const SecAggRevealedShare& r : m->shares) {
      auto* orv = o->add_shares();
      orv->set_owner(r.owner);
      orv->set_kind(static_cast<pb::SecAggSecretKind>(r.kind));
      orv->set_x(r.x);
      orv->set_y(r.y.data(), r.y.size());
    }
  } else if (const auto* m = std::get_if<TransferQuery>(&body)) {
    env->mutable_transfer_query()->set_message_id(m->message_id);
  } else if (const auto* m = std::get_if<TransferResume>(&body)) {
    auto* o = env->mutable_transfer_resume();
    o->set_message_id(m->message_id);
    o->set_state(static_cast<pb::TransferState>(m->state));
    o->set_next_chunk(m->next_chunk);
  } else if (const auto* m = std::get_if<Reject>(&body)) {
    auto* o = env->mutable_reject();
    o->set_reason(static_cast<pb::RejectReason>(m->reason));
    o->set_text(m->text);
    o->set_rejected_message_id(m->rejected_message_id);
  }
}

// The body of a non-chunk envelope. `framing` is filled when the body has a payload.
Status BodyFromProto(const pb::Envelope& env, const WireLimits& l, Body* body, Framing* framing) {
  switch (env.body_case()) {
    case pb::Envelope::kRegistration: {
      const auto& i = env.registration();
      if (static_cast<size_t>(i.capabilities_size()) > l.max_capabilities) {
        return Status::OutOfRange(StrCat("Register lists ", i.capabilities_size(),
                                         " capabilities; the limit is ", l.max_capabilities,
                                         " (max_capabilities)"));
      }
      Register m;
      m.node_id = i.node_id();
      m.num_examples = i.num_examples();
      m.capabilities.assign(i.capabilities().begin(), i.capabilities().end());
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kRegisterAck: {
      const auto& i = env.register_ack();
      *body = RegisterAck{i.node_id(), i.heartbeat_interval_ms()};
      return Status::OK();
    }
    case pb::Envelope::kFitTask: {
      const auto& i = env.fit_task();
      FitTask m;
      m.round = i.round();
      FM_RETURN_IF_ERROR(
          FromProto(i.global_model(), "FitTask.global_model", l, &m.global_model, framing));
      m.local_epochs = i.local_epochs();
      m.batch_size = i.batch_size();
      m.learning_rate = i.learning_rate();
      m.momentum = i.momentum();
      m.prox_mu = i.prox_mu();
      m.deadline_unix_ms = i.deadline_unix_ms();
      m.update_codec = i.update_codec();
      m.with_prediction = i.with_prediction();
      m.model_sha256 = i.model_sha256();
      m.model_graph = i.model_graph();
      m.loss = i.loss();
      m.class_weights.assign(i.class_weights().begin(), i.class_weights().end());
      m.pos_weight = i.pos_weight();
      m.evaluate_only = i.evaluate_only();
      m.finetune_epochs = i.finetune_epochs();
      m.local_only_epochs = i.local_only_epochs();
      m.candidate = i.candidate();
      m.collect_local_models = i.collect_local_models();
      if (i.impute_values_size() > static_cast<int>(kMaxStatsFeatures)) {
        return Status::OutOfRange(StrCat("FitTask carries ", i.impute_values_size(),
                                         " impute_values; the limit is ", kMaxStatsFeatures));
      }
      m.impute_values.assign(i.impute_values().begin(), i.impute_values().end());
      m.chunk_data_parts = i.chunk_data_parts();
      if (i.has_statistics()) FM_RETURN_IF_ERROR(FromProto(i.statistics(), &m.statistics.emplace()));
      if (i.has_secagg()) {
        const pb::SecAggParameters& p = i.secagg();
        m.secagg = SecAggParameters{p.threshold(), p.neighbours(),  p.clip(),
                                    p.bits(),      p.min_clients(), p.max_clients(),
                                    p.noise_stddev()};
      }
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kFitResult: {
      const auto& i = env.fit_result();
      FitResult m;
      m.round = i.round();
      m.num_examples = i.num_examples();
      m.train_loss = i.train_loss();
      FM_RETURN_IF_ERROR(FromProto(i.update(), "FitResult.update", l, &m.update, framing));
      m.bytes_before_codec = i.bytes_before_codec();
      m.bytes_after_codec = i.bytes_after_codec();
      m.applied_prediction = i.applied_prediction();
      m.evaluation = i.evaluation();
      if (i.metrics_size() > static_cast<int>(kMaxEvalMetrics)) {
        return Status::OutOfRange(StrCat("FitResult carries ", i.metrics_size(),
                                         " metrics; the limit is ", kMaxEvalMetrics));
      }
      for (const auto& [name, value] : i.metrics()) m.metrics[name] = value;
      if (i.has_statistics()) FM_RETURN_IF_ERROR(FromProto(i.statistics(), &m.statistics.emplace()));
      m.local_model = i.local_model();
      m.signature.assign(i.signature().begin(), i.signature().end());
      if (i.has_record_privacy()) m.record_privacy = FromProto(i.record_privacy());
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kHeartbeat:
      *body = Heartbeat{env.heartbeat().sequence()};
      return Status::OK();
    case pb::Envelope::kReject: {
      const auto& i = env.reject();
      if (i.text().size() > l.max_text_bytes) {
        return Status::OutOfRange(StrCat("Reject text is ", i.text().size(),
                                         " bytes; the limit is ", l.max_text_bytes,
                                         " (max_text_bytes)"));
      }
      *body = Reject{static_cast<RejectReason>(i.reason()), i.text(), i.rejected_message_id()};
      return Status::OK();
    }
    case pb::Envelope::kMembership: {
      const auto& i = env.membership();
      if (static_cast<size_t>(i.updates_size()) > l.max_members) {
        return Status::OutOfRange(StrCat("Membership carries ", i.updates_size(),
                                         " member updates; the limit is ", l.max_members,
                                         " (max_members)"));
      }
      Membership m;
      m.kind = static_cast<MembershipKind>(i.kind());
      m.probe_id = i.probe_id();
      m.target = i.target();
      m.updates.reserve(static_cast<size_t>(i.updates_size()));
      for (int k = 0; k < i.updates_size(); ++k) {
        const auto& iu = i.updates(k);
        MemberUpdate u;
        u.id = iu.id();
        u.endpoint = iu.endpoint();
        if (iu.curve_public().size() != u.curve_public.size() ||
            iu.sign_public().size() != u.sign_public.size()) {
          return Status::InvalidArgument(StrCat("Membership update ", k, " has keys of ",
                                                iu.curve_public().size(), " and ",
                                                iu.sign_public().size(), " bytes; both must be 32"));
        }
        std::memcpy(u.curve_public.data(), iu.curve_public().data(), u.curve_public.size());
        std::memcpy(u.sign_public.data(), iu.sign_public().data(), u.sign_public.size());
        u.incarnation = iu.incarnation();
        u.state = static_cast<MemberState>(iu.state());
        if (!iu.signature().empty() && iu.signature().size() != 64) {
          return Status::InvalidArgument(StrCat("Membership update ", k, " has a signature of ",
                                                iu.signature().size(),
                                                " bytes; it must be 64 (Ed25519) or empty"));
        }
        u.signature.assign(iu.signature().begin(), iu.signature().end());
        m.updates.push_back(std::move(u));
      }
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kGossipModel: {
      const auto& i = env.gossip_model();
      GossipModel m;
      m.kind = static_cast<GossipKind>(i.kind());
      m.sequence = i.sequence();
      m.step = i.step();
      m.weight = i.weight();
      FM_RETURN_IF_ERROR(FromProto(i.model(), "GossipModel.model", l, &m.model, framing));
      m.signature.assign(i.signature().begin(), i.signature().end());
      m.model_sha256 = i.model_sha256();
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kSecaggAdvertiseKeys: {
      const auto& i = env.secagg_advertise_keys();
      FM_RETURN_IF_ERROR(CheckSecAggKeys("SecAggAdvertiseKeys", i.channel_public_key().size(),
                                         i.masking_public_key().size(), i.signature().size()));
      SecAggAdvertiseKeys m;
      m.federation_id = i.federation_id();
      m.round = i.round();
      m.client_id = i.client_id();
      CopyKey(i.channel_public_key(), &m.channel_public_key);
      CopyKey(i.masking_public_key(), &m.masking_public_key);
      CopyKey(i.signature(), &m.signature);
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kSecaggRoster: {
      const auto& i = env.secagg_roster();
      FM_RETURN_IF_ERROR(CheckSecAggCount("SecAggRoster", static_cast<size_t>(i.members_size()),
                                          "members", l.max_secagg_clients, "max_secagg_clients"));
      FM_RETURN_IF_ERROR(CheckExactBytes(i.graph_seed().size(), kSecAggGraphSeedBytes,
                                         "SecAggRoster graph_seed", "a graph seed"));
      SecAggRoster m;
      m.federation_id = i.federation_id();
      m.round = i.round();
      m.members.reserve(static_cast<size_t>(i.members_size()));
      for (int k = 0; k < i.members_size(); ++k) {
        const pb::SecAggRosterMember& ik = i.members(k);
        FM_RETURN_IF_ERROR(CheckSecAggKeys(StrCat("SecAggRoster member ", k),
                                           ik.channel_public_key().size(),
                                           ik.masking_public_key().size(), ik.signature().size()));
        SecAggRosterMember member;
        member.client_id = ik.client_id();
        CopyKey(ik.channel_public_key(), &member.channel_public_key);
        CopyKey(ik.masking_public_key(), &member.masking_public_key);
        CopyKey(ik.signature(), &member.signature);
        m.members.push_back(std::move(member));
      }
      CopyKey(i.graph_seed(), &m.graph_seed);
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kSecaggShareKeys: {
      const auto& i = env.secagg_share_keys();
      FM_RETURN_IF_ERROR(
          CheckSecAggBoxCount("SecAggShareKeys", static_cast<size_t>(i.boxes_size())));
      SecAggShareKeys m;
      m.federation_id = i.federation_id();
      m.round = i.round();
      m.client_id = i.client_id();
      FM_RETURN_IF_ERROR(SealedSharesFromProto("SecAggShareKeys", i.boxes(), &m.boxes));
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kSecaggForwardedShares: {
      const auto& i = env.secagg_forwarded_shares();
      FM_RETURN_IF_ERROR(
          CheckSecAggBoxCount("SecAggForwardedShares", static_cast<size_t>(i.boxes_size())));
      SecAggForwardedShares m;
      m.federation_id = i.federation_id();
      m.round = i.round();
      m.recipient = i.recipient();
      FM_RETURN_IF_ERROR(SealedSharesFromProto("SecAggForwardedShares", i.boxes(), &m.boxes));
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kSecaggMaskedInput: {
      const auto& i = env.secagg_masked_input();
      SecAggMaskedInput m;
      m.federation_id = i.federation_id();
      m.round = i.round();
      m.client_id = i.client_id();
      FM_RETURN_IF_ERROR(FromProto(i.masked(), "SecAggMaskedInput.masked", l, &m.masked, framing));
      if (i.has_record_privacy()) m.record_privacy = FromProto(i.record_privacy());
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kSecaggUnmaskRequest: {
      const auto& i = env.secagg_unmask_request();
      FM_RETURN_IF_ERROR(CheckSecAggRequestCount(static_cast<size_t>(i.survivors_size()),
                                                 static_cast<size_t>(i.dropped_size()), l));
      SecAggUnmaskRequest m;
      m.federation_id = i.federation_id();
      m.round = i.round();
      m.survivors.assign(i.survivors().begin(), i.survivors().end());
      m.dropped.assign(i.dropped().begin(), i.dropped().end());
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kSecaggUnmaskShares: {
      const auto& i = env.secagg_unmask_shares();
      FM_RETURN_IF_ERROR(CheckSecAggShareCount(static_cast<size_t>(i.shares_size())));
      SecAggUnmaskShares m;
      m.federation_id = i.federation_id();
      m.round = i.round();
      m.client_id = i.client_id();
      m.shares.reserve(static_cast<size_t>(i.shares_size()));
      for (int k = 0; k < i.shares_size(); ++k) {
        const pb::SecAggRevealedShare& ir = i.shares(k);
        FM_RETURN_IF_ERROR(CheckShareX(ir.x(), static_cast<size_t>(k)));
        FM_RETURN_IF_ERROR(CheckExactBytes(ir.y().size(), kSecAggShareBytes,
                                           StrCat("SecAggUnmaskShares share ", k, " y"),
                                           "a share of a 32-byte secret"));
        SecAggRevealedShare r;
        r.owner = ir.owner();
        r.kind = static_cast<SecAggSecretKind>(ir.kind());
        r.x = static_cast<uint8_t>(ir.x());
        r.y.assign(ir.y().begin(), ir.y().end());
        m.shares.push_back(std::move(r));
      }
      *body = std::move(m);
      return Status::OK();
    }
    case pb::Envelope::kTransferQuery:
      *body = TransferQuery{env.transfer_query().message_id()};
      return Status::OK();
    case pb::Envelope::kTransferResume: {
      const auto& i = env.transfer_resume();
      // A state unknown to this build is kept as is and refused by CheckBody.
      *body = TransferResume{i.message_id(), static_cast<TransferState>(i.state()), i.next_chunk()};
      return Status::OK();
    }
    case pb::Envelope::kChunk:
    case pb::Envelope::BODY_NOT_SET:
      break;
  }
  return Status::Internal("BodyFromProto called without a message body");
}

}  // namespace fedmesh::wire
