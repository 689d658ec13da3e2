#pragma once

#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief Why the batcher failed a request rather than handing it to the model.
enum class batch_errc {
  deadline_exceeded = 1,  ///< the request's deadline passed while it was queued; it never ran
  cancelled,              ///< its stop_token was stopped or cancel(id) was called; it never ran
  queue_full,             ///< the queue was at max_queued / max_queued_cost and the overflow policy rejects
  closed,                 ///< submitted after close(), or still queued at close(drain::no) or destruction
  abandoned,              ///< its batch was destroyed before fulfill() or fail()
  result_count_mismatch,  ///< fulfill() got a result count different from the batch size
  timeout,                ///< a blocking submit waited block_timeout for room and gave up
};

/// @brief A short name for the code, e.g. "deadline_exceeded".
inline constexpr const char* to_string(batch_errc c) noexcept {
  switch (c) {
    case batch_errc::deadline_exceeded:
      return "deadline_exceeded";
    case batch_errc::cancelled:
      return "cancelled";
    case batch_errc::queue_full:
      return "queue_full";
    case batch_errc::closed:
      return "closed";
    case batch_errc::abandoned:
      return "abandoned";
    case batch_errc::result_count_mismatch:
      return "result_count_mismatch";
    case batch_errc::timeout:
      return "timeout";
  }
  return "unknown";
}

/// @brief The exception a request's future (or callback result) holds when the batcher failed it.
class batch_error : public std::runtime_error {
 public:
  batch_error(batch_errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  explicit batch_error(batch_errc code) : batch_error(code, default_message(code)) {}
  /// @brief The cause, so callers can tell a shed request from a closed batcher.
  batch_errc code() const noexcept { return code_; }

 private:
  static std::string default_message(batch_errc c) {
    switch (c) {
      case batch_errc::deadline_exceeded:
        return "frugal::batcher: the request's deadline passed while it was queued";
      case batch_errc::cancelled:
        return "frugal::batcher: the request was cancelled before it ran";
      case batch_errc::queue_full:
        return "frugal::batcher: the queue is full (max_queued or max_queued_cost)";
      case batch_errc::closed:
        return "frugal::batcher: the batcher is closed";
      case batch_errc::abandoned:
        return "frugal::batcher: the batch was destroyed without fulfill() or fail()";
      case batch_errc::result_count_mismatch:
        return "frugal::batcher: fulfill() got a result count different from the batch size";
      case batch_errc::timeout:
        return "frugal::batcher: submit timed out waiting for room in the queue";
    }
    return "frugal::batcher: unknown error";
  }

  batch_errc code_;
};

/// @brief What a callback-form submit receives: the result, or the exception that failed the request.
template <class T>
class result {
 public:
  result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  result(std::exception_ptr error) : v_(std::in_place_index<1>, std::move(error)) {}

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }

  /// @brief The result; rethrows the error if there is none.
  T& value() & {
    rethrow_if_error();
    return std::get<0>(v_);
  }
  T&& value() && {
    rethrow_if_error();
    return std::get<0>(std::move(v_));
  }
  const T& value() const& {
    rethrow_if_error();
    return std::get<0>(v_);
  }
  /// @brief The result, unchecked: only after has_value().
  T& operator*() & { return std::get<0>(v_); }
  const T& operator*() const& { return std::get<0>(v_); }
  T&& operator*() && { return std::get<0>(std::move(v_)); }

  /// @brief The error, or a null pointer when there is a value.
  std::exception_ptr error() const noexcept { return has_value() ? nullptr : std::get<1>(v_); }

  /// @brief The batcher's code when the error is a batch_error; empty for a value or a model's own exception.
  std::optional<batch_errc> code() const {
    if (has_value()) return std::nullopt;
    try {
      std::rethrow_exception(std::get<1>(v_));
    } catch (const batch_error& e) {
      return e.code();
    } catch (...) {
      return std::nullopt;
    }
  }

 private:
  void rethrow_if_error() const {
    if (!has_value()) std::rethrow_exception(std::get<1>(v_));
  }

  std::variant<T, std::exception_ptr> v_;
};

namespace detail {
// One shared, immutable exception per code: failing many queued requests at once allocates nothing.
inline std::exception_ptr batch_error_ptr(batch_errc c) {
  static const std::exception_ptr ptrs[] = {
      std::make_exception_ptr(batch_error(batch_errc::deadline_exceeded)),
      std::make_exception_ptr(batch_error(batch_errc::cancelled)),
      std::make_exception_ptr(batch_error(batch_errc::queue_full)),
      std::make_exception_ptr(batch_error(batch_errc::closed)),
      std::make_exception_ptr(batch_error(batch_errc::abandoned)),
      std::make_exception_ptr(batch_error(batch_errc::result_count_mismatch)),
      std::make_exception_ptr(batch_error(batch_errc::timeout)),
  };
  return ptrs[static_cast<int>(c) - 1];
}
}  // namespace detail

FRUGAL_END_NAMESPACE
