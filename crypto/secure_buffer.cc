#include "crypto/secure_buffer.h"

#include <sodium.h>

#include <algorithm>
#include <string>
#include <utility>

#include "crypto/sodium.h"

namespace fedmesh {

Result<SecureBuffer> SecureBuffer::Create(size_t size) {
  FM_RETURN_IF_ERROR(InitSodium());
  // An empty secret needs no guarded pages; sodium_malloc(0) would still map several.
  if (size == 0) return SecureBuffer();
  auto* p = static_cast<uint8_t*>(sodium_malloc(size));
  if (p == nullptr) {
    return Status::Internal("sodium_malloc could not allocate a " + std::to_string(size) +
                            "-byte secure buffer (out of memory or address space)");
  }
  // sodium_malloc fills new memory with 0xdb to expose uninitialised reads; callers get
  // zeros so an unfilled key is recognisably unset rather than plausible-looking.
  sodium_memzero(p, size);
  return SecureBuffer(p, size);
}

Result<SecureBuffer> SecureBuffer::CopyOf(std::span<const uint8_t> bytes) {
  FM_ASSIGN_OR_RETURN(SecureBuffer buffer, Create(bytes.size()));
  if (!bytes.empty()) std::copy(bytes.begin(), bytes.end(), buffer.data());
  return buffer;
}

SecureBuffer::~SecureBuffer() { Release(); }

SecureBuffer::SecureBuffer(SecureBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

SecureBuffer& SecureBuffer::operator=(SecureBuffer&& other) noexcept {
  if (this != &other) {
    Release();  // the secret we held must not outlive its owner's intent
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void SecureBuffer::Wipe() {
  // sodium_memzero is not optimised away, unlike a memset the compiler can prove dead.
  if (data_ != nullptr) sodium_memzero(data_, size_);
}

void SecureBuffer::Release() {
  if (data_ == nullptr) return;
  // sodium_free also zeroes, but wiping explicitly keeps the guarantee independent of the
  // allocator (and of a future switch to a plain locked vector).
  Wipe();
  sodium_free(data_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace fedmesh
