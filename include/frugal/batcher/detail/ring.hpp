#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

// A growable circular FIFO: amortised zero allocations per push, unlike std::deque's node blocks.
template <class T>
class ring {
 public:
  ring() = default;
  ring(const ring&) = delete;
  ring& operator=(const ring&) = delete;
  ring(ring&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        cap_(std::exchange(o.cap_, 0)),
        head_(std::exchange(o.head_, 0)),
        size_(std::exchange(o.size_, 0)) {}
  ring& operator=(ring&&) = delete;
  ~ring() {
    clear();
    if (data_) std::allocator<T>{}.deallocate(data_, cap_);
  }

  bool empty() const noexcept { return size_ == 0; }
  std::size_t size() const noexcept { return size_; }
  T& operator[](std::size_t i) noexcept { return data_[(head_ + i) & (cap_ - 1)]; }
  const T& operator[](std::size_t i) const noexcept { return data_[(head_ + i) & (cap_ - 1)]; }
  T& front() noexcept { return data_[head_]; }
  const T& front() const noexcept { return data_[head_]; }

  void push_back(T&& v) {
    if (size_ == cap_) grow();
    ::new (static_cast<void*>(data_ + ((head_ + size_) & (cap_ - 1)))) T(std::move(v));
    ++size_;
  }
  void pop_front() noexcept {
    data_[head_].~T();
    head_ = (head_ + 1) & (cap_ - 1);
    --size_;
  }
  void clear() noexcept {
    while (size_ != 0) pop_front();
  }

 private:
  void grow() {
    const std::size_t cap = cap_ == 0 ? 16 : cap_ * 2;
    T* data = std::allocator<T>{}.allocate(cap);
    for (std::size_t i = 0; i < size_; ++i) {
      T& from = (*this)[i];
      ::new (static_cast<void*>(data + i)) T(std::move(from));
      from.~T();
    }
    if (data_) std::allocator<T>{}.deallocate(data_, cap_);
    data_ = data;
    cap_ = cap;
    head_ = 0;
  }

  T* data_ = nullptr;
  std::size_t cap_ = 0;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace detail
FRUGAL_END_NAMESPACE
