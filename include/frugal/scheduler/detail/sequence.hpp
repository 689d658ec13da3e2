#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stop_token>
#include <utility>
#include <vector>

#include "frugal/batcher/errors.hpp"
#include "frugal/kv/kv_cache.hpp"
#include "frugal/namespace.hpp"
#include "frugal/scheduler/options.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

using generation_callback = std::function<void(result<generation>)>;

inline constexpr std::int64_t no_deadline = std::numeric_limits<std::int64_t>::max();

// A sequence from submit to resolution. Waiting, it holds no KV blocks; running, it is owned by the loop
// thread alone. Times are nanoseconds on the scheduler's clock.
struct sched_seq {
  sequence_id id = 0;
  std::size_t priority = 0;
  std::int64_t arrival = 0;
  std::int64_t deadline = no_deadline;
  std::int64_t last_token = 0;
  std::vector<kv_token> tokens;  // prompt, then generated tokens (the last one not computed yet)
  std::size_t prompt_len = 0;
  std::size_t max_tokens = 0;
  std::size_t generated = 0;  // sampled, a stop token included
  std::vector<kv_token> stop;
  sampling_params sampling{};
  kv_salt salt{};
  std::function<void(kv_token)> on_token;
  std::stop_token stop_when;
  generation_callback done;

  kv_sequence_id kv{};
  std::size_t computed = 0;  // tokens appended to the KV sequence and committed
  std::size_t computed_before_preemption = 0;
  std::size_t cached_tokens = 0;
  std::size_t preemptions = 0;
  std::int64_t ttft = -1;
  bool admitted = false;
  bool ended = false;
};

// Higher priority first, then earlier submit: the order of admission, and, reversed, of preemption.
inline bool outranks(const sched_seq& a, const sched_seq& b) noexcept {
  return a.priority != b.priority ? a.priority > b.priority : a.id < b.id;
}

// A resolution to deliver once the lock is released.
struct sched_resolution {
  generation_callback done;
  std::optional<generation> value;
  std::exception_ptr error;

  void deliver() noexcept {
    if (!done) return;
    if (value)
      done(result<generation>(std::move(*value)));
    else
      done(result<generation>(error));
  }
};

inline generation finished_generation(sched_seq& s, finish_reason why, std::optional<kv_token> stop_token) {
  generation g;
  g.tokens.assign(s.tokens.begin() + static_cast<std::ptrdiff_t>(s.prompt_len), s.tokens.end());
  g.reason = why;
  g.stop_token = stop_token;
  g.prompt_tokens = s.prompt_len;
  g.cached_tokens = s.cached_tokens;
  g.preemptions = s.preemptions;
  g.time_to_first_token = std::chrono::nanoseconds(s.ttft < 0 ? 0 : s.ttft);
  return g;
}

// A priority level of the waiting queue, sorted by id: submits append larger ids, a preempted sequence goes
// back to its place, and cancel() finds an id by binary search.
using sched_level = std::deque<std::unique_ptr<sched_seq>>;

inline sched_level::iterator find_in_level(sched_level& l, sequence_id id) {
  auto it = std::lower_bound(l.begin(), l.end(), id,
                             [](const std::unique_ptr<sched_seq>& s, sequence_id x) { return s->id < x; });
  return it != l.end() && (*it)->id == id ? it : l.end();
}

inline void insert_in_level(sched_level& l, std::unique_ptr<sched_seq> s) {
  auto it = std::lower_bound(l.begin(), l.end(), s->id,
                             [](const std::unique_ptr<sched_seq>& x, sequence_id id) { return x->id < id; });
  l.insert(it, std::move(s));
}

}  // namespace detail
FRUGAL_END_NAMESPACE
