// Secure aggregation on the wire: conversions between the protocol's messages
// (secagg_messages.h, what SecAggClient and SecAggServer take and return) and their plain
// wire structs (core/wire/messages.h, what wire::Encode and wire::Decode carry), plus the
// secure aggregation settings a FitTask carries to a node. This is the one place that
// knows both sides; neither the protocol core nor the wire codec depends on the other.
//
// Sending: ToWire(message), put it in a wire::Message whose header names the same
// federation, round and (for a client's message) sender, and wire::Encode it; Encode
// refuses whatever a receiver would refuse. Receiving: wire::Decode, then FromWire, then
// hand the result to the client or server, which checks the protocol content (signatures,
// neighbours, rounds). FromWire checks what the wire structs cannot express by their types:
// byte lengths of boxes and shares, x-coordinates, the secret kind and the masked payload's
// encoding, so a wire struct that did not come through Decode is refused the same way.
// There is no stage field on the wire: a message's type is its stage.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>

#include "core/status.h"
#include "core/wire/messages.h"
#include "crypto/secagg/secagg_messages.h"
#include "crypto/secagg/secagg_options.h"

namespace fedmesh {

// Stage 0, client -> server.
wire::SecAggAdvertiseKeys ToWire(const AdvertiseKeys& message);
Result<AdvertiseKeys> FromWire(const wire::SecAggAdvertiseKeys& message);

// Stage 0 closed, server -> members. On the wire a member carries no federation or round
// of its own: FromWire gives each one the roster's, which is all a client can accept
// anyway (it verifies signatures over its own federation and round).
wire::SecAggRoster ToWire(const Roster& message);
Result<Roster> FromWire(const wire::SecAggRoster& message);

// Stage 1, client -> server. InvalidArgument for a box that is not kShareBoxSize bytes.
wire::SecAggShareKeys ToWire(const ShareKeys& message);
Result<ShareKeys> FromWire(const wire::SecAggShareKeys& message);

// Stage 1 closed, server -> one client. InvalidArgument for a box of the wrong size.
wire::SecAggForwardedShares ToWire(const ForwardedShares& message);
Result<ForwardedShares> FromWire(const wire::SecAggForwardedShares& message);

// Stage 2, client -> server. The masked words travel as a codec "none" uint32 payload.
// FromWire: InvalidArgument for a payload of another dtype or byte count,
// FailedPrecondition for another codec.
wire::SecAggMaskedInput ToWire(const MaskedInput& message);
Result<MaskedInput> FromWire(const wire::SecAggMaskedInput& message);

// Stage 2 closed, server -> survivors.
wire::SecAggUnmaskRequest ToWire(const UnmaskRequest& message);
Result<UnmaskRequest> FromWire(const wire::SecAggUnmaskRequest& message);

// Stage 3, client -> server. FromWire: InvalidArgument for an unknown secret kind, x = 0,
// or a y that is not kSecAggSecretSize bytes. ToWire writes an invalid SecretKind as kind
// 0, which wire::Encode refuses.
wire::SecAggUnmaskShares ToWire(const UnmaskShares& message);
Result<UnmaskShares> FromWire(const wire::SecAggUnmaskShares& message);

// The settings of `options` a node cannot know, for FitTask::secagg. max_clients 0 (the
// default: the allowlist's size) is resolved to `allowlist_size`, so that nodes with
// allowlists of another size still encode alike. Federation, round and vector size are
// not included: a node takes them from the FitTask (below).
wire::SecAggParameters ToWire(const SecAggOptions& options, size_t allowlist_size);

// The options a node's SecAggClient needs for `task`: federation from header.federation_id,
// round from task.round, vector_size from task.global_model.element_count, the rest from
// task.secagg. FailedPrecondition when the task does not ask for secure aggregation;
// InvalidArgument (from SecAggOptions::Validate) for settings no SecAggClient accepts.
Result<SecAggOptions> FromWire(const wire::Header& header, const wire::FitTask& task);

}  // namespace fedmesh
