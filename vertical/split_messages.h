// What the parties of split training send each other (vertical/split_job.h), as bytes in
// kMessage chunks over the group's CurveZMQ links. Layout, little-endian:
//   0  magic "FMSP"   4 version (1)   5 type   6 flags (bit 0: training forward, bit 1: signed)
//   7  wire type (vertical/cut_wire.h: 0 float32, 1 fp16, 2 bf16, 3 int8)
//   8  step u64       16 micro u32    20 rows u32   24 cols u32   28 reserved u32 = 0
//   32 count u64 (indices, or text bytes)          40 reserved u64 = 0
//   48 count u64 indices (align, forward) or count text bytes (error, hello, resume, done, part), then rows x cols
//      values in the wire type (activations, gradients);
//   then, when signed, the sender's 64-byte Ed25519 signature (vertical/split_signature.h).
// Authenticity: the transport's CurveZMQ session is keyed to the sender's allowlisted
// identity, so a message is the sender's and unaltered in transit; the signature makes it
// attributable afterwards too (fedmesh-node signs every message and accepts only signed ones).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "vertical/cut_wire.h"

namespace fedmesh::vertical {

enum class SplitMessageType : uint8_t {
  kAlign = 1,        // label -> feature: positions into the feature party's PSI rows, in the job's row order
  kForward = 2,      // label -> feature: run the bottom model on these rows (indices)
  kActivations = 3,  // feature -> label: the bottom model's output for a forward (rows x cols)
  kGradients = 4,    // label -> feature: d loss / d activations for a training forward
  kDone = 5,         // label -> feature: training is over after `step` steps
  kError = 6,        // either way: the sender stopped, text says why
  kCheckpoint = 7,   // label -> feature: save your part after `step` steps
  kCheckpointed = 8, // feature -> label: saved `step`
  kHello = 9,        // feature -> label, at a restart: its newest checkpoint is `step`, text its alignment
  kResume = 10,      // label -> feature: go back to the checkpoint of `step`; text the alignment expected
  kResumed = 11,     // feature -> label: back at `step`
  kPart = 12,        // feature -> label, after done "parts": its trained part as ONNX (empty: no consent)
};
const char* SplitMessageTypeName(SplitMessageType t);

// The header's size, where its flags byte is, and the flag that says a signature follows
// (set by SignSplitMessage, vertical/split_signature.h).
inline constexpr size_t kSplitHeaderBytes = 48;
inline constexpr size_t kSplitFlagsOffset = 6;
inline constexpr uint8_t kSplitSignedFlag = 2;

struct SplitMessage {
  SplitMessageType type = SplitMessageType::kForward;
  bool training = false;
  CutWire wire = CutWire::kFloat32;
  bool signed_by_sender = false;  // decoded: the bytes end with a signature (checked apart)
  uint64_t step = 0;
  uint32_t micro = 0;
  uint32_t rows = 0, cols = 0;
  std::vector<uint64_t> indices;
  std::vector<float> values;  // rows * cols
  std::string text;
};

struct SplitMessageLimits {
  uint64_t max_indices = 100'000'000;   // an align or forward message's indices
  uint64_t max_values = uint64_t{1} << 28;  // rows * cols of activations or gradients (1 GiB)
  uint64_t max_part_bytes = uint64_t{1} << 30;  // a part's ONNX bytes
};

// InvalidArgument when values cannot be put on the wire (an fp16 overflow) or sizes disagree.
Result<std::string> EncodeSplitMessage(const SplitMessage& m);
// Corruption naming what is wrong: short, magic, version, type, reserved bytes, sizes that
// do not add up, counts over `limits`, an invalid int8 scale, or a non-finite activation or
// gradient. A signed message's signature is skipped here: VerifySplitMessage checks it.
Result<SplitMessage> DecodeSplitMessage(std::string_view bytes, const SplitMessageLimits& limits = {});
// Whether `bytes` starts like a split message (as opposed to a PSI one).
bool IsSplitMessage(std::string_view bytes);

}  // namespace fedmesh::vertical
