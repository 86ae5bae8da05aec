#include "vertical/split_messages.h"

#include <cmath>
#include <cstring>

#include "crypto/identity.h"


namespace fedmesh::vertical {
namespace {

constexpr char kMagic[4] = {'F', 'M', 'S', 'P'};
constexpr uint8_t kVersion = 1;
constexpr size_t kHeader = kSplitHeaderBytes;
constexpr uint8_t kTrainingFlag = 1, kSignedFlag = kSplitSignedFlag;
constexpr size_t kSignatureBytes = kSignatureSize;

template <typename T>
void Put(std::string& s, size_t at, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) s[at + i] = static_cast<char>(static_cast<uint64_t>(v) >> (8 * i));
}
template <typename T>
T Get(std::string_view s, size_t at) {
  uint64_t v = 0;
  for (size_t i = sizeof(T); i-- > 0;) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return static_cast<T>(v);
}
bool HasValues(SplitMessageType t) {
  return t == SplitMessageType::kActivations || t == SplitMessageType::kGradients;
}
bool HasIndices(SplitMessageType t) { return t == SplitMessageType::kAlign || t == SplitMessageType::kForward; }
bool HasText(SplitMessageType t) {
  return t == SplitMessageType::kError || t == SplitMessageType::kHello || t == SplitMessageType::kResume ||
         t == SplitMessageType::kDone || t == SplitMessageType::kPart;
}

}  // namespace

const char* SplitMessageTypeName(SplitMessageType t) {
  switch (t) {
    case SplitMessageType::kAlign: return "align";
    case SplitMessageType::kForward: return "forward";
    case SplitMessageType::kActivations: return "activations";
    case SplitMessageType::kGradients: return "gradients";
    case SplitMessageType::kDone: return "done";
    case SplitMessageType::kError: return "error";
    case SplitMessageType::kCheckpoint: return "checkpoint";
    case SplitMessageType::kCheckpointed: return "checkpointed";
    case SplitMessageType::kHello: return "hello";
    case SplitMessageType::kResume: return "resume";
    case SplitMessageType::kResumed: return "resumed";
    case SplitMessageType::kPart: return "part";
  }
  return "?";
}

bool IsSplitMessage(std::string_view bytes) { return bytes.size() >= 4 && std::memcmp(bytes.data(), kMagic, 4) == 0; }

Result<std::string> EncodeSplitMessage(const SplitMessage& m) {
  if (HasValues(m.type) && m.values.size() != uint64_t{m.rows} * m.cols) {
    return Status::InvalidArgument(std::string(SplitMessageTypeName(m.type)) + " message: " +
                                   std::to_string(m.values.size()) + " values for " + std::to_string(m.rows) + " x " +
                                   std::to_string(m.cols));
  }
  const uint64_t count = HasText(m.type) ? m.text.size() : HasIndices(m.type) ? m.indices.size() : 0;
  std::string values;
  if (HasValues(m.type)) FM_RETURN_IF_ERROR(EncodeCutValues(m.wire, m.values, values));
  std::string out(kHeader, '\0');
  std::memcpy(out.data(), kMagic, 4);
  out[4] = static_cast<char>(kVersion);
  out[5] = static_cast<char>(m.type);
  out[kSplitFlagsOffset] = static_cast<char>(m.training ? kTrainingFlag : 0);
  out[7] = static_cast<char>(m.wire);
  Put<uint64_t>(out, 8, m.step);
  Put<uint32_t>(out, 16, m.micro);
  Put<uint32_t>(out, 20, m.rows);
  Put<uint32_t>(out, 24, m.cols);
  Put<uint64_t>(out, 32, count);
  if (HasText(m.type)) {
    out += m.text;
  } else if (HasIndices(m.type)) {
    const size_t at = out.size();
    out.resize(at + 8 * count);
    for (size_t i = 0; i < count; ++i) Put<uint64_t>(out, at + 8 * i, m.indices[i]);
  }
  out += values;
  return out;
}

Result<SplitMessage> DecodeSplitMessage(std::string_view b, const SplitMessageLimits& limits) {
  auto bad = [](const std::string& why) { return Status::Corruption("split message: " + why); };
  if (b.size() < kHeader) return bad(std::to_string(b.size()) + " bytes, shorter than the 48-byte header");
  if (!IsSplitMessage(b)) return bad("wrong magic (not a fedmesh split-training message)");
  if (static_cast<uint8_t>(b[4]) != kVersion) return bad("version " + std::to_string(static_cast<uint8_t>(b[4])));
  const auto type = static_cast<uint8_t>(b[5]);
  if (type < 1 || type > 12) return bad("unknown type " + std::to_string(type));
  const auto flags = static_cast<uint8_t>(b[kSplitFlagsOffset]);
  const auto wire = static_cast<uint8_t>(b[7]);
  if (flags > (kTrainingFlag | kSignedFlag) || wire > static_cast<uint8_t>(kLastCutWire)) {
    return bad("unknown flags or wire type");
  }
  if (Get<uint32_t>(b, 28) != 0 || Get<uint64_t>(b, 40) != 0) return bad("reserved bytes are not zero");
  SplitMessage m;
  m.type = static_cast<SplitMessageType>(type);
  m.training = (flags & kTrainingFlag) != 0;
  m.signed_by_sender = (flags & kSignedFlag) != 0;
  m.wire = static_cast<CutWire>(wire);
  m.step = Get<uint64_t>(b, 8);
  m.micro = Get<uint32_t>(b, 16);
  m.rows = Get<uint32_t>(b, 20);
  m.cols = Get<uint32_t>(b, 24);
  const uint64_t count = Get<uint64_t>(b, 32);
  const std::string what = SplitMessageTypeName(m.type);
  const uint64_t values = uint64_t{m.rows} * m.cols;
  if (HasValues(m.type) && values > limits.max_values) {
    return bad(what + " of " + std::to_string(m.rows) + " x " + std::to_string(m.cols) + " values is over the limit of " +
               std::to_string(limits.max_values));
  }
  if (HasIndices(m.type) && count > limits.max_indices) {
    return bad(what + " with " + std::to_string(count) + " indices is over the limit of " +
               std::to_string(limits.max_indices));
  }
  const uint64_t body = HasText(m.type) ? count
                        : HasIndices(m.type)              ? 8 * count
                        : HasValues(m.type)               ? CutWireBytes(m.wire, values)
                                                          : 0;
  const uint64_t trailer = m.signed_by_sender ? kSignatureBytes : 0;
  if ((!HasIndices(m.type) && !HasText(m.type) && count != 0) || b.size() - kHeader != body + trailer) {
    return bad(what + " message of " + std::to_string(b.size()) + " bytes, expected " +
               std::to_string(kHeader + body + trailer));
  }
  if (HasText(m.type)) {
    const uint64_t limit = m.type == SplitMessageType::kPart ? limits.max_part_bytes : 4096;
    if (count > limit) return bad(what + " of " + std::to_string(count) + " bytes is over the limit of " + std::to_string(limit));
    m.text = std::string(b.substr(kHeader, count));
  } else if (HasIndices(m.type)) {
    m.indices.resize(count);
    for (uint64_t i = 0; i < count; ++i) m.indices[i] = Get<uint64_t>(b, kHeader + 8 * i);
  } else if (HasValues(m.type)) {
    m.values.resize(values);
    Status v = DecodeCutValues(m.wire, b.substr(kHeader, body), m.values);
    if (!v.ok()) return bad(what + " for step " + std::to_string(m.step) + ": " + v.message());
    for (size_t i = 0; i < m.values.size(); ++i) {
      if (!std::isfinite(m.values[i])) {
        return bad(what + " for step " + std::to_string(m.step) + " holds a non-finite value at row " +
                   std::to_string(i / m.cols) + ", column " + std::to_string(i % m.cols));
      }
    }
  }
  return m;
}

}  // namespace fedmesh::vertical
