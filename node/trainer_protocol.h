// The message format between fedmesh-node and an external trainer process (protocol 1,
// docs/external-trainer.md): frames of a fixed 16-byte prefix (magic "FMTR", header
// length, payload length), a JSON header and the tensors as raw little-endian float32.
// Everything here is pure encoding, decoding and checking, with no I/O, so that every
// malformed frame a trainer can send is tested without a process; node/external_trainer.h
// moves the bytes. Thread-safety: pure functions and values.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fedmesh::trainer {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr size_t kPrefixBytes = 16;
inline constexpr uint32_t kMaxHeaderBytes = 1u << 20;
inline constexpr size_t kMaxTensors = 100000;
inline constexpr size_t kMaxTensorRank = 8;
inline constexpr size_t kMaxMessageBytes = 1024;  // of an error message kept

// One named float32 tensor of the model, as both sides list it.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // [] for a scalar
  uint64_t elements() const;

  friend bool operator==(const TensorSpec&, const TensorSpec&) = default;
};

struct FramePrefix {
  uint32_t header_length = 0;
  uint64_t payload_length = 0;
};

std::array<uint8_t, kPrefixBytes> EncodePrefix(uint32_t header_length, uint64_t payload_length);
// InvalidArgument for a wrong magic ("not a fedmesh trainer message"), a header length
// outside [2, kMaxHeaderBytes], or a payload over `max_payload` bytes.
Result<FramePrefix> ParsePrefix(std::span<const uint8_t, kPrefixBytes> bytes,
                                uint64_t max_payload);

// Node -> trainer.
struct TaskRequest {
  std::string kind = "fit";  // "fit" | "evaluate"
  uint64_t task_id = 0;
  uint64_t round = 0;
  std::string node_id;
  uint32_t epochs = 1;
  uint64_t steps = 0;  // > 0: that many minibatch steps instead of epochs (gossip)
  double lr = 0.01;
  uint32_t batch = 32;
  double momentum = 0;
  double prox_mu = 0;
  uint64_t seed = 0;
  std::string loss = "cross_entropy";
  uint64_t deadline_unix_ms = 0;
  std::vector<TensorSpec> tensors;  // the payload's layout
};

std::string EncodeTaskHeader(const TaskRequest& request);
std::string EncodeShutdownHeader();

// Trainer -> node.
struct TrainerMessage {
  enum class Type { kHello, kResult, kError };
  Type type = Type::kHello;
  // hello
  uint32_t protocol = 0;
  std::optional<uint64_t> hello_examples;
  std::string name;
  // result and error
  uint64_t task_id = 0;
  // result
  uint64_t num_examples = 0;
  std::map<std::string, double> metrics;
  std::vector<TensorSpec> tensors;
  // error: what the trainer said (cut to kMaxMessageBytes, control characters replaced)
  std::string message;
};

// Parses and checks a trainer's JSON header: a JSON object with a known "type" and fields
// of the right types (integers where counts are; finite metrics with names of 1..64
// characters of [A-Za-z0-9_.-]; tensors with non-negative dimensions, at most
// kMaxTensors of rank <= kMaxTensorRank; "float32" the only dtype). A hello must speak
// protocol 1. InvalidArgument naming the field otherwise.
Result<TrainerMessage> ParseTrainerHeader(std::string_view json);

// Matches a result's tensors to the task's: the same names, each once, with the same
// shapes. Returns, for each tensor in `got` order, its index in `expected`. The error
// names the first missing, unexpected or misshaped tensor.
Result<std::vector<size_t>> MatchTensors(const std::vector<TensorSpec>& expected,
                                         const std::vector<TensorSpec>& got);

// 4 * total elements: the payload bytes of `tensors`. Saturates rather than overflowing.
uint64_t PayloadBytes(const std::vector<TensorSpec>& tensors);

}  // namespace fedmesh::trainer
