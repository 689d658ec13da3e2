#pragma once

// A model that holds many records at once and finishes them in any order: a decoder under an
// iteration-level scheduler (frugal::scheduler), where a short completion leaves the step while a long one
// goes on and a new record takes its place. The runner's worker keeps it fed (add while room() allows) and
// steps it; it writes results in input order, so a record finished early waits for those before it, and a
// checkpoint covers the finished prefix of the input. A stop request is honoured between two steps: the
// records in flight are dropped and a resume runs them again.

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>

#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace job {

struct record;

class stream_model {
 public:
  /// @brief Receives a record's result, once.
  using done_function = std::function<void(nlohmann::json result)>;

  virtual ~stream_model() = default;
  /// @brief How many more records it takes now; 0 until a step finishes some.
  virtual std::size_t room() = 0;
  /// @brief Takes a record; `done` is called once with its result, from this call (a record it answers at
  /// once, with an error result say) or from a later step(). An exception fails the job (batch_failed).
  virtual void add(const record& r, done_function done) = 0;
  /// @brief Runs one step of the records it holds; false when it holds none. An exception fails the job.
  virtual bool step() = 0;
};

}  // namespace job
FRUGAL_END_NAMESPACE
