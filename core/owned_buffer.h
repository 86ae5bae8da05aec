// OwnedBuffer: a typed buffer in some owner's memory (a Backend's, a BatchedOps'), freed
// through the owner when it goes (RAII, move-only). DeviceBuffer (core/backend.h) and
// OpsBuffer (core/batched/batched_ops.h) add how they allocate.
// Thread-safety: as the owner's.
#pragma once

#include <cstddef>
#include <utility>

namespace fedmesh {

template <typename T, typename Owner>
class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  // Takes `data` (count elements, allocated by `owner`; null when count is 0).
  OwnedBuffer(Owner* owner, T* data, size_t count) : owner_(owner), data_(data), count_(count) {}
  ~OwnedBuffer() { reset(); }
  OwnedBuffer(OwnedBuffer&& o) noexcept { *this = std::move(o); }
  OwnedBuffer& operator=(OwnedBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      owner_ = o.owner_;
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;

  void reset() {
    if (data_ != nullptr) owner_->Free(data_);
    data_ = nullptr;
    count_ = 0;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }

 private:
  Owner* owner_ = nullptr;
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace fedmesh
