#pragma once

#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief Why the scheduler ended a sequence without finishing it. A model's own exception (fail()) reaches
/// the caller as it was thrown, not as one of these.
enum class scheduler_errc {
  deadline_exceeded = 1,  ///< its deadline passed, waiting or running; its blocks were freed
  cancelled,              ///< cancel(id) or its stop_token; its blocks were freed at the next step boundary
  queue_full,             ///< submitted while max_waiting sequences waited; rejected at once
  too_long,    ///< it could never fit: prompt over max_context, or its peak KV over the whole budget
  closed,      ///< submitted after close(), or unresolved when the scheduler was destroyed
  bad_logits,  ///< the model's logits row for it had no finite value, so nothing could be sampled
};

/// @brief A short name for the code, e.g. "deadline_exceeded".
inline constexpr const char* to_string(scheduler_errc c) noexcept {
  switch (c) {
    case scheduler_errc::deadline_exceeded:
      return "deadline_exceeded";
    case scheduler_errc::cancelled:
      return "cancelled";
    case scheduler_errc::queue_full:
      return "queue_full";
    case scheduler_errc::too_long:
      return "too_long";
    case scheduler_errc::closed:
      return "closed";
    case scheduler_errc::bad_logits:
      return "bad_logits";
  }
  return "unknown";
}

/// @brief The exception a sequence's future (or callback result) holds when the scheduler ended it.
class scheduler_error : public std::runtime_error {
 public:
  scheduler_error(scheduler_errc code, const std::string& what) : std::runtime_error(what), code_(code) {}
  explicit scheduler_error(scheduler_errc code)
      : scheduler_error(code, std::string("frugal::scheduler: ") + default_message(code)) {}
  scheduler_errc code() const noexcept { return code_; }

 private:
  static const char* default_message(scheduler_errc c) noexcept {
    switch (c) {
      case scheduler_errc::deadline_exceeded:
        return "the sequence's deadline passed before it finished";
      case scheduler_errc::cancelled:
        return "the sequence was cancelled";
      case scheduler_errc::queue_full:
        return "the waiting queue is full (max_waiting)";
      case scheduler_errc::too_long:
        return "the sequence can never fit (max_context or the KV cache's budget)";
      case scheduler_errc::closed:
        return "the scheduler is closed";
      case scheduler_errc::bad_logits:
        return "the model's logits for the sequence had no finite value";
    }
    return "unknown error";
  }

  scheduler_errc code_;
};

/// @brief The scheduler's code in an error, or empty for none or a model's own exception.
inline std::optional<scheduler_errc> scheduler_code(const std::exception_ptr& e) {
  if (!e) return std::nullopt;
  try {
    std::rethrow_exception(e);
  } catch (const scheduler_error& x) {
    return x.code();
  } catch (...) {
    return std::nullopt;
  }
}

namespace detail {
// One shared, immutable exception per code: ending many sequences at once allocates nothing.
inline std::exception_ptr scheduler_error_ptr(scheduler_errc c) {
  static const std::exception_ptr ptrs[] = {
      std::make_exception_ptr(scheduler_error(scheduler_errc::deadline_exceeded)),
      std::make_exception_ptr(scheduler_error(scheduler_errc::cancelled)),
      std::make_exception_ptr(scheduler_error(scheduler_errc::queue_full)),
      std::make_exception_ptr(scheduler_error(scheduler_errc::too_long)),
      std::make_exception_ptr(scheduler_error(scheduler_errc::closed)),
      std::make_exception_ptr(scheduler_error(scheduler_errc::bad_logits)),
  };
  return ptrs[static_cast<int>(c) - 1];
}
}  // namespace detail

FRUGAL_END_NAMESPACE
