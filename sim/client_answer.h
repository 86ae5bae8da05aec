// ClientAnswer: a simulated client's answer to a task as a sharded run carries it from the
// client's owning rank to the others (sim/rank_group.h): the job's error, its refusal, or
// the encoded frames of the message it sends. Every other rank decodes the same frames the
// owner decoded, so every rank's round engine sees the same update bytes in the same
// order, and aggregates them in the same float order as a one-process run.
// The byte form is native-endian: the ranks of one run share a build and an architecture.
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/wire/wire_codec.h"

namespace fedmesh {

struct ClientAnswer {
  Status job_status;                // the training / evaluation job failed
  std::string refused;              // else non-empty: the client refused the task (why)
  Status send_status;               // else not OK: its answer failed to encode
  std::vector<wire::Frame> frames;  // else: the message it sends, as Encode made it
};

std::vector<uint8_t> EncodeClientAnswer(const ClientAnswer& answer);
// Corruption when `bytes` are not what EncodeClientAnswer makes.
Result<ClientAnswer> DecodeClientAnswer(std::span<const uint8_t> bytes);

}  // namespace fedmesh
