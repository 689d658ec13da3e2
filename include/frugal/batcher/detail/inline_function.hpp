#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

template <class Signature, std::size_t Capacity = 48>
class inline_function;

// A move-only std::function that keeps small callables (a promise, a few captured pointers) in place,
// so the callback path of submit allocates nothing per request.
template <class R, class... Args, std::size_t Capacity>
class inline_function<R(Args...), Capacity> {
  struct vtable {
    R (*call)(void*, Args&&...);
    void (*move)(void* to, void* from) noexcept;  // move-constructs into `to` and destroys `from`
    void (*destroy)(void*) noexcept;
    bool trivial;  // trivially copyable and destructible: moved by memcpy, never destroyed
  };

  template <class F>
  static constexpr bool stored_inline =
      sizeof(F) <= Capacity &&
      alignof(F) <= alignof(std::max_align_t) && std::is_nothrow_move_constructible_v<F>;

  template <class F>
  static constexpr vtable inline_vtable{
      [](void* p, Args&&... a) -> R { return (*static_cast<F*>(p))(std::forward<Args>(a)...); },
      [](void* to, void* from) noexcept {
        ::new (to) F(std::move(*static_cast<F*>(from)));
        static_cast<F*>(from)->~F();
      },
      [](void* p) noexcept { static_cast<F*>(p)->~F(); },
      std::is_trivially_copyable_v<F>&& std::is_trivially_destructible_v<F>};

  template <class F>
  static constexpr vtable heap_vtable{
      [](void* p, Args&&... a) -> R { return (**static_cast<F**>(p))(std::forward<Args>(a)...); },
      [](void* to, void* from) noexcept { ::new (to) F*(*static_cast<F**>(from)); },
      [](void* p) noexcept { delete *static_cast<F**>(p); }, false};

 public:
  inline_function() noexcept = default;

  template <class F>
  requires(!std::is_same_v<std::decay_t<F>, inline_function> &&
           std::is_invocable_r_v<R, std::decay_t<F>&, Args...>)
      inline_function(F&& f) {  // NOLINT(google-explicit-constructor): it stands in for a callable
    using D = std::decay_t<F>;
    if constexpr (stored_inline<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
      vt_ = &inline_vtable<D>;
    } else {
      ::new (static_cast<void*>(buf_)) D*(new D(std::forward<F>(f)));
      vt_ = &heap_vtable<D>;
    }
  }

  inline_function(inline_function&& o) noexcept : vt_(o.vt_) { relocate_from(o); }
  inline_function& operator=(inline_function&& o) noexcept {
    if (this != &o) {
      reset();
      vt_ = o.vt_;
      relocate_from(o);
    }
    return *this;
  }
  inline_function(const inline_function&) = delete;
  inline_function& operator=(const inline_function&) = delete;
  ~inline_function() { reset(); }

  explicit operator bool() const noexcept { return vt_ != nullptr; }
  R operator()(Args... a) { return vt_->call(buf_, std::forward<Args>(a)...); }

  void reset() noexcept {
    if (vt_ && !vt_->trivial) vt_->destroy(buf_);
    vt_ = nullptr;
  }

 private:
  // Requests pass through the queue and a batch, so most callbacks (a few captured pointers) are moved
  // twice; memcpy spares an indirect call each time.
  void relocate_from(inline_function& o) noexcept {
    if (vt_) {
      if (vt_->trivial)
        std::memcpy(buf_, o.buf_, Capacity);
      else
        vt_->move(buf_, o.buf_);
    }
    o.vt_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char buf_[Capacity];
  const vtable* vt_ = nullptr;
};

}  // namespace detail
FRUGAL_END_NAMESPACE
