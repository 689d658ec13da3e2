#pragma once

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief The base of every error a model_pool throws on its own account (a loader's exceptions reach
/// the caller unchanged). model() names the model concerned.
class pool_error : public std::runtime_error {
 public:
  pool_error(std::string model, const std::string& what)
      : std::runtime_error(what), model_(std::move(model)) {}
  const std::string& model() const noexcept { return model_; }

 private:
  std::string model_;
};

/// @brief acquire() of a name that is not in the pool's config.
class unknown_model : public pool_error {
 public:
  explicit unknown_model(std::string model)
      : pool_error(model, "frugal::model_pool: unknown model \"" + model + "\"") {}
};

/// @brief The model needs more bytes than the whole budget; refused at once, without evicting anything.
class model_too_large : public pool_error {
 public:
  model_too_large(std::string model, std::size_t bytes, std::size_t budget)
      : pool_error(model, "frugal::model_pool: model \"" + model + "\" needs " + std::to_string(bytes) +
                              " bytes, more than the whole budget of " + std::to_string(budget) + " bytes"),
        bytes_(bytes),
        budget_(budget) {}
  std::size_t bytes() const noexcept { return bytes_; }
  std::size_t budget() const noexcept { return budget_; }

 private:
  std::size_t bytes_;
  std::size_t budget_;
};

/// @brief The model does not fit beside the models that are leased (or loading), and none left within the
/// acquire timeout.
class pool_exhausted : public pool_error {
 public:
  pool_exhausted(std::string model, std::size_t bytes, std::size_t used, std::size_t held, std::size_t budget)
      : pool_error(model, "frugal::model_pool: pool exhausted: model \"" + model + "\" needs " +
                              std::to_string(bytes) + " bytes; " + std::to_string(used) + " of the " +
                              std::to_string(budget) + " byte budget are in use, " + std::to_string(held) +
                              " of them by leased or loading models, and not enough was released within the "
                              "acquire timeout"),
        bytes_(bytes),
        used_(used),
        held_(held),
        budget_(budget) {}
  /// @brief The bytes the model needs.
  std::size_t bytes() const noexcept { return bytes_; }
  /// @brief The bytes charged when it gave up, and of them those of leased or loading models.
  std::size_t used() const noexcept { return used_; }
  std::size_t held() const noexcept { return held_; }
  std::size_t budget() const noexcept { return budget_; }

 private:
  std::size_t bytes_;
  std::size_t used_;
  std::size_t held_;
  std::size_t budget_;
};

/// @brief The model already has max_users leases, and none ended within the acquire timeout.
class model_busy : public pool_error {
 public:
  model_busy(std::string model, std::size_t max_users)
      : pool_error(model, "frugal::model_pool: model \"" + model +
                              "\" has all of its max_users = " + std::to_string(max_users) +
                              " leases taken, and none ended within the acquire timeout"),
        max_users_(max_users) {}
  std::size_t max_users() const noexcept { return max_users_; }

 private:
  std::size_t max_users_;
};

/// @brief The model's last load failed and its retry backoff has not yet run out; what() carries the
/// failure's message.
class load_backoff : public pool_error {
 public:
  load_backoff(std::string model, std::size_t failures, std::chrono::nanoseconds retry_in,
               const std::string& last)
      : pool_error(model, "frugal::model_pool: model \"" + model + "\" failed to load " +
                              std::to_string(failures) + " time(s) in a row; next try in " +
                              std::to_string(
                                  std::chrono::duration_cast<std::chrono::milliseconds>(retry_in).count()) +
                              " ms; last error: " + last),
        failures_(failures),
        retry_in_(retry_in) {}
  std::size_t failures() const noexcept { return failures_; }
  std::chrono::nanoseconds retry_in() const noexcept { return retry_in_; }

 private:
  std::size_t failures_;
  std::chrono::nanoseconds retry_in_;
};

FRUGAL_END_NAMESPACE
