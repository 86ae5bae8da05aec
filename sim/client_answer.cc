#include "sim/client_answer.h"

#include <cstring>

namespace fedmesh {
namespace {

// Layout: job status, refused, send status, frame count, frames. A status is its code
// (u32) and message; a string or frame its length (u64) and bytes.
void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

void PutBytes(std::vector<uint8_t>& out, const void* data, size_t n) {
  PutU64(out, n);
  const auto* p = static_cast<const uint8_t*>(data);
  out.insert(out.end(), p, p + n);
}

void PutStatus(std::vector<uint8_t>& out, const Status& s) {
  PutU64(out, static_cast<uint64_t>(s.code()));
  PutBytes(out, s.message().data(), s.message().size());
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  bool U64(uint64_t& v) {
    if (bytes_.size() - at_ < sizeof v) return false;
    std::memcpy(&v, bytes_.data() + at_, sizeof v);
    at_ += sizeof v;
    return true;
  }
  bool Bytes(std::span<const uint8_t>& v) {
    uint64_t n = 0;
    if (!U64(n) || n > bytes_.size() - at_) return false;
    v = bytes_.subspan(at_, n);
    at_ += n;
    return true;
  }
  bool Text(std::string& v) {
    std::span<const uint8_t> b;
    if (!Bytes(b)) return false;
    v.assign(b.begin(), b.end());
    return true;
  }
  bool StatusOf(Status& s) {
    uint64_t code = 0;
    std::string message;
    if (!U64(code) || !Text(message) || code > static_cast<uint64_t>(StatusCode::kInternal)) {
      return false;
    }
    s = code == 0 ? Status::OK() : Status(static_cast<StatusCode>(code), std::move(message));
    return true;
  }
  bool AtEnd() const { return at_ == bytes_.size(); }

 private:
  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
};

}  // namespace

std::vector<uint8_t> EncodeClientAnswer(const ClientAnswer& a) {
  std::vector<uint8_t> out;
  size_t total = 64 + a.refused.size();
  for (const auto& f : a.frames) total += f.size() + sizeof(uint64_t);
  out.reserve(total);
  PutStatus(out, a.job_status);
  PutBytes(out, a.refused.data(), a.refused.size());
  PutStatus(out, a.send_status);
  PutU64(out, a.frames.size());
  for (const auto& f : a.frames) PutBytes(out, f.data(), f.size());
  return out;
}

Result<ClientAnswer> DecodeClientAnswer(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  ClientAnswer a;
  uint64_t frames = 0;
  if (!r.StatusOf(a.job_status) || !r.Text(a.refused) || !r.StatusOf(a.send_status) ||
      !r.U64(frames) || frames > bytes.size()) {
    return Status::Corruption("a client answer from another rank is malformed (" +
                              std::to_string(bytes.size()) + " bytes)");
  }
  a.frames.resize(frames);
  for (auto& f : a.frames) {
    std::span<const uint8_t> b;
    if (!r.Bytes(b)) {
      return Status::Corruption("a client answer from another rank ends inside frame " +
                                std::to_string(&f - a.frames.data()));
    }
    f.assign(b.begin(), b.end());
  }
  if (!r.AtEnd()) return Status::Corruption("a client answer from another rank has trailing bytes");
  return a;
}

}  // namespace fedmesh
