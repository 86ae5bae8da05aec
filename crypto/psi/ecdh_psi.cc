#include "crypto/psi/ecdh_psi.h"

#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/hex.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "crypto/sodium.h"

namespace fedmesh::psi {
namespace {

constexpr std::string_view kOrderDomain = "fedmesh-psi-order-v1";

// The order's seed from both nonces (sorted, so both parties compute the same) and the
// shared order_seed.
uint64_t OrderSeed(const PsiTag& a, const PsiTag& b, uint64_t order_seed) {
  const PsiTag& lo = std::memcmp(a.data(), b.data(), a.size()) <= 0 ? a : b;
  const PsiTag& hi = &lo == &a ? b : a;
  Sha256 h;
  h.Update(kOrderDomain);
  h.Update(std::span<const uint8_t>(lo));
  h.Update(std::span<const uint8_t>(hi));
  uint8_t s[8];
  for (int i = 0; i < 8; ++i) s[i] = static_cast<uint8_t>(order_seed >> (8 * i));
  h.Update(std::span<const uint8_t>(s, 8));
  const Sha256Digest d = h.Finish();
  uint64_t seed = 0;
  for (int i = 0; i < 8; ++i) seed |= uint64_t{d[i]} << (8 * i);
  return seed;
}

}  // namespace

size_t PsiParty::PointHash::operator()(const Point& p) const {
  size_t h;  // the points are uniformly distributed: their bytes are a hash already
  std::memcpy(&h, p.data(), sizeof h);
  return h;
}

PsiParty::~PsiParty() = default;

Result<std::unique_ptr<PsiParty>> PsiParty::Create(std::span<const std::string> ids, const PsiOptions& options) {
  if (options.batch == 0) return Status::InvalidArgument("PsiOptions.batch must be at least 1");
  if (ids.size() > options.max_ids) {
    return Status::InvalidArgument("psi: " + std::to_string(ids.size()) + " ids is over the limit of " +
                                   std::to_string(options.max_ids) + " (PsiOptions.max_ids)");
  }
  {
    std::unordered_map<std::string_view, size_t> first;
    first.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto [it, inserted] = first.emplace(ids[i], i);
      if (!inserted) {
        return Status::InvalidArgument("psi: id \"" + ids[i].substr(0, 64) + "\" appears twice (ids " +
                                       std::to_string(it->second + 1) + " and " + std::to_string(i + 1) +
                                       "); ids must be unique");
      }
    }
  }
  std::unique_ptr<PsiParty> p(new PsiParty());
  p->options_ = options;
  FM_ASSIGN_OR_RETURN(p->scalar_, RandomScalar());
  randombytes_buf(p->nonce_.data(), p->nonce_.size());
  // A secret shuffle: the peer sees positions, never which id sits at one.
  p->sent_order_.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) p->sent_order_[i] = i;
  for (size_t i = ids.size(); i > 1; --i) {
    const uint32_t j = randombytes_uniform(static_cast<uint32_t>(std::min<size_t>(i, UINT32_MAX)));
    std::swap(p->sent_order_[i - 1], p->sent_order_[j]);
  }
  std::vector<Point> hashed = HashIds(ids);
  p->mine_.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) p->mine_[i] = hashed[p->sent_order_[i]];
  return p;
}

Result<std::vector<std::string>> PsiParty::Start() {
  if (started_) return Status::FailedPrecondition("psi: Start() called twice");
  started_ = true;
  FM_RETURN_IF_ERROR(Blind(scalar_.span(), mine_));
  std::vector<std::string> out;
  const uint64_t n = mine_.size();
  for (uint64_t off = 0; off == 0 || off < n; off += options_.batch) {
    const uint64_t count = std::min<uint64_t>(options_.batch, n - off);
    out.push_back(EncodePsiMessage(PsiMessageType::kBlinded, n, off, nonce_,
                                   std::span<const Point>(mine_).subspan(off, count)));
  }
  mine_.clear();
  mine_.shrink_to_fit();  // a·H(x) is not needed again: the peer returns ab·H(x)
  my_double_.reserve(n);
  return out;
}

Status PsiParty::Receive(std::string_view message, std::vector<std::string>* out) {
  if (!started_) return Status::FailedPrecondition("psi: Receive() before Start()");
  if (done_) return Status::Corruption("psi: a message after the intersection was agreed");
  FM_ASSIGN_OR_RETURN(PsiMessage m, DecodePsiMessage(message, options_.max_ids));
  switch (m.type) {
    case PsiMessageType::kBlinded:
      FM_RETURN_IF_ERROR(OnBlinded(m, out));
      break;
    case PsiMessageType::kDoubleBlinded:
      FM_RETURN_IF_ERROR(OnDoubleBlinded(m));
      break;
    case PsiMessageType::kConfirm:
      if (peer_confirm_) return Status::Corruption("psi: the peer confirmed twice");
      m.points = {};
      peer_confirm_ = m;
      break;
  }
  FM_RETURN_IF_ERROR(MaybeFinish(out));
  if (computed_ && peer_confirm_) FM_RETURN_IF_ERROR(CheckConfirm());
  return Status::OK();
}

Status PsiParty::OnBlinded(const PsiMessage& m, std::vector<std::string>* out) {
  if (!peer_nonce_) {
    if (m.offset != 0) return Status::Corruption("psi: the peer's first batch starts at " + std::to_string(m.offset));
    peer_nonce_ = m.tag;
    peer_total_ = m.total;
    peer_double_.reserve(m.total);
  } else if (m.tag != *peer_nonce_ || m.total != peer_total_) {
    return Status::Corruption("psi: the peer's batches disagree on its set (nonce or size changed)");
  } else if (peer_received_ == peer_total_) {
    return Status::Corruption("psi: a blinded batch after the peer's whole set");
  }
  if (m.offset != peer_received_) {
    return Status::Corruption("psi: the peer's batch starts at " + std::to_string(m.offset) + ", expected " +
                              std::to_string(peer_received_));
  }
  std::vector<Point> batch(m.count());
  if (!batch.empty()) std::memcpy(batch.data(), m.points.data(), m.points.size());
  FM_RETURN_IF_ERROR(Blind(scalar_.span(), batch));
  peer_received_ += batch.size();
  for (const Point& p : batch) peer_double_.insert(p);
  out->push_back(EncodePsiMessage(PsiMessageType::kDoubleBlinded, m.total, m.offset, PsiTag{}, batch));
  return Status::OK();
}

Status PsiParty::OnDoubleBlinded(const PsiMessage& m) {
  if (m.total != sent_order_.size()) {
    return Status::Corruption("psi: the peer returned a set of " + std::to_string(m.total) + " for the " +
                              std::to_string(sent_order_.size()) + " ids this party sent");
  }
  if (got_own_reply_ && my_double_.size() == m.total) {
    return Status::Corruption("psi: a returned batch after this party's whole set");
  }
  if (m.offset != my_double_.size()) {
    return Status::Corruption("psi: the peer's returned batch starts at " + std::to_string(m.offset) +
                              ", expected " + std::to_string(my_double_.size()));
  }
  const size_t at = my_double_.size();
  my_double_.resize(at + m.count());
  if (m.count() > 0) std::memcpy(my_double_[at].data(), m.points.data(), m.points.size());
  got_own_reply_ = true;
  return Status::OK();
}

Status PsiParty::MaybeFinish(std::vector<std::string>* out) {
  if (computed_ || !peer_nonce_ || peer_received_ != peer_total_ || !got_own_reply_ ||
      my_double_.size() != sent_order_.size()) {
    return Status::OK();
  }
  // Pairs (ab·H value, id index) in the intersection, sorted by value: an order both sides
  // share without knowing each other's ids, unrelated to the ids' own sort order.
  std::vector<std::pair<Point, uint64_t>> common;
  for (size_t i = 0; i < my_double_.size(); ++i) {
    if (peer_double_.count(my_double_[i]) > 0) common.emplace_back(my_double_[i], sent_order_[i]);
  }
  std::sort(common.begin(), common.end());
  Rng rng(OrderSeed(nonce_, *peer_nonce_, options_.order_seed));
  for (size_t i = common.size(); i > 1; --i) std::swap(common[i - 1], common[rng.UniformInt(i)]);
  Sha256 h;
  result_.rows.reserve(common.size());
  for (const auto& [value, row] : common) {
    h.Update(std::span<const uint8_t>(value));
    result_.rows.push_back(row);
  }
  const Sha256Digest d = h.Finish();
  std::copy(d.begin(), d.end(), my_digest_.begin());
  result_.digest = Sha256Hex(d);
  result_.my_count = sent_order_.size();
  result_.peer_count = peer_total_;
  computed_ = true;
  peer_double_ = {};
  my_double_ = {};
  out->push_back(EncodePsiMessage(PsiMessageType::kConfirm, common.size(), 0, my_digest_, {}));
  return Status::OK();
}

Status PsiParty::CheckConfirm() {
  if (peer_confirm_->total != result_.rows.size() || peer_confirm_->tag != my_digest_) {
    return Status::Corruption("psi: the parties disagree on the intersection: this party found " +
                              std::to_string(result_.rows.size()) + " common ids, the peer " +
                              std::to_string(peer_confirm_->total) +
                              (peer_confirm_->total == result_.rows.size() ? " in another order or set" : "") +
                              " (same PsiOptions.order_seed on both sides?)");
  }
  done_ = true;
  return Status::OK();
}

}  // namespace fedmesh::psi
