// SecureBuffer: an owned byte buffer for secret material (secret keys, mask seeds, shared
// secrets). Its memory comes from sodium_malloc, so it is locked out of swap where the OS
// allows, sits between guard pages, and is wiped with sodium_memzero before it is released
// (on destruction, on move-assignment over it, and on Wipe()). It is move-only so a secret
// never gets silently duplicated. Thread-safety: like std::vector, concurrent reads are
// safe; any write or move needs external synchronisation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"

namespace fedmesh {

class SecureBuffer {
 public:
  // An empty buffer: size() == 0, data() == nullptr.
  SecureBuffer() = default;

  // A zero-filled buffer of `size` bytes. Fails with Internal when libsodium cannot start
  // or the guarded allocation fails (out of memory or address space).
  static Result<SecureBuffer> Create(size_t size);
  // A buffer holding a copy of `bytes`. The caller stays responsible for wiping its own copy.
  static Result<SecureBuffer> CopyOf(std::span<const uint8_t> bytes);

  ~SecureBuffer();
  SecureBuffer(SecureBuffer&& other) noexcept;
  SecureBuffer& operator=(SecureBuffer&& other) noexcept;
  SecureBuffer(const SecureBuffer&) = delete;
  SecureBuffer& operator=(const SecureBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<uint8_t> span() { return {data_, size_}; }
  std::span<const uint8_t> span() const { return {data_, size_}; }

  // Overwrites the contents with zeros now; the size is unchanged. Use it as soon as a
  // secret is no longer needed even if the buffer itself lives on.
  void Wipe();

 private:
  SecureBuffer(uint8_t* data, size_t size) : data_(data), size_(size) {}
  // Wipes and frees the memory; leaves the buffer empty.
  void Release();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace fedmesh
