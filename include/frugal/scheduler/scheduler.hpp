#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "frugal/batcher/light_future.hpp"
#include "frugal/cost/histogram.hpp"
#include "frugal/kv/kv_cache.hpp"
#include "frugal/namespace.hpp"
#include "frugal/quant/parallel.hpp"
#include "frugal/scheduler/detail/core.hpp"
#include "frugal/scheduler/detail/sequence.hpp"
#include "frugal/scheduler/errors.hpp"
#include "frugal/scheduler/options.hpp"
#include "frugal/scheduler/sampling.hpp"
#include "frugal/scheduler/step.hpp"

FRUGAL_BEGIN_NAMESPACE

/// @brief A future for a sequence's generation, with the id that cancels it.
struct generation_ticket {
  light_future<generation> result;
  sequence_id id = 0;
};

/// @brief Iteration-level scheduling (Orca) over a paged KV cache, for a decoder loop the user owns.
/// Producers submit() sequences from any thread; the loop thread takes a step (try_next_step, or
/// next_step, which waits for work), runs the model on it, and hands back the logits (complete) or the
/// tokens it sampled itself (complete_sampled), or its exception (fail). Sequences join and leave between
/// steps. Every submitted sequence resolves exactly once: a generation (finish_reason stop or length), a
/// scheduler_error (cancelled, deadline_exceeded, queue_full, too_long, closed, bad_logits), or the
/// model's exception. fail() does not retry: a model that failed once on a step would likely fail again,
/// and the caller knows better whether to resubmit.
///
/// A step: every running sequence whose next token is due gets it (decode), in rank order (higher priority,
/// then earlier submit); then prefill chunks of running sequences and, while fewer than max_running run,
/// of newly admitted ones fill what is left of step_tokens. The scheduler appends each entry's tokens to
/// the KV cache before handing out the step, and commits them in complete().
///
/// When blocks run out, a sequence takes those of the lowest-ranked running sequence below it, which is
/// preempted by recompute: its blocks are released and it goes back to the waiting queue with its generated
/// tokens kept, to be prefilled again (the prefix cache gives back the full blocks nobody evicted
/// meanwhile). Recompute rather than swap because its cost is a prefill, which runs at many tokens per
/// weight read, and under prefix caching most of it is a hit; a swap would need host memory sized for the
/// preempted sequences and copies on every preemption, and would bypass the prefix cache. The highest-ranked
/// sequence can always take every other's blocks, so a sequence that fits the budget alone (checked at
/// submit: a longer one is rejected with too_long) never fails for want of memory. No new sequence is
/// admitted in a step that preempted one.
///
/// Thread safety: submit, cancel, close, stats and idle from any thread; try_next_step, next_step,
/// complete, complete_sampled and fail from one loop thread at a time, which also owns the kv_cache (it
/// must outlive the scheduler). Callbacks run without the scheduler's lock held: rejections on the
/// submitting thread, cancellation of a waiting sequence on the cancelling thread, the rest on the loop.
template <class Clock = std::chrono::steady_clock>
class scheduler : private detail::scheduler_core {
 public:
  using clock_type = Clock;
  using time_point = typename Clock::time_point;
  using request = basic_generation_request<time_point>;
  /// @brief Receives the generation or the error, once; must not throw.
  using callback = detail::generation_callback;

  /// @brief Validates the options (std::invalid_argument naming the field).
  explicit scheduler(kv_cache& kv, scheduler_options options = {}, Clock clock = {})
      : detail::scheduler_core(kv, options), clock_(std::move(clock)) {}
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  /// @brief Ends every unresolved sequence with closed and releases its blocks. Call it on the loop thread,
  /// with no step outstanding that will be completed later.
  ~scheduler() {
    std::vector<detail::sched_resolution> out;
    {
      std::lock_guard lk(m_);
      closed_ = true;
      for (auto& level : levels_)
        for (auto& s : level) resolve_error(*s, scheduler_errc::closed, out);
      for (auto& s : running_) {
        kv_.release(s->kv);
        resolve_error(*s, scheduler_errc::closed, out);
      }
      waiting_ = 0;
      running_count_ = 0;
    }
    for (auto& r : out) r.deliver();
  }

  /// @brief Queues a sequence; done receives its generation or error exactly once. A sequence rejected at
  /// once (closed, too_long, queue_full, already cancelled or past its deadline) has done called on this
  /// thread before submit returns. Throws std::invalid_argument for an empty prompt, a priority out of
  /// range, max_tokens 0, a bad temperature or top_p, or an empty callback.
  sequence_id submit(request r, callback done) {
    check(r, done);
    const std::int64_t now = ns(clock_.now());
    auto s = std::make_unique<detail::sched_seq>();
    s->priority = r.priority;
    s->arrival = now;
    s->deadline = r.deadline == time_point::max() ? detail::no_deadline : ns(r.deadline);
    s->prompt_len = r.prompt.size();
    s->tokens = std::move(r.prompt);
    s->max_tokens = r.max_tokens;
    s->stop = std::move(r.stop);
    s->sampling = r.sampling;
    s->salt = r.salt;
    s->on_token = std::move(r.on_token);
    s->stop_when = std::move(r.stop_when);
    s->done = std::move(done);
    const bool too_long = !fits_alone(*s);
    std::optional<scheduler_errc> err;
    sequence_id id;
    {
      std::lock_guard lk(m_);
      ++submitted_;
      id = s->id = next_id_++;
      if (closed_)
        err = scheduler_errc::closed;
      else if (too_long)
        err = scheduler_errc::too_long;
      else if (s->stop_when.stop_requested())
        err = scheduler_errc::cancelled;
      else if (s->deadline <= now)
        err = scheduler_errc::deadline_exceeded;
      else if (waiting_ >= o_.max_waiting)
        err = scheduler_errc::queue_full;
      if (err) {
        count(*err);
      } else {
        levels_[s->priority].push_back(std::move(s));
        ++waiting_;
      }
    }
    if (err) {
      detail::sched_resolution r1{std::move(s->done), std::nullopt, detail::scheduler_error_ptr(*err)};
      r1.deliver();
    } else {
      cv_.notify_one();
    }
    return id;
  }

  /// @brief The future form of submit.
  generation_ticket submit(request r) {
    auto* state = new detail::light_state<generation>();
    generation_ticket t{light_future<generation>(state), 0};
    try {
      t.id = submit(std::move(r), [state](result<generation> g) { state->set(std::move(g)); });
    } catch (...) {
      state->release();  // the callback never ran
      throw;
    }
    return t;
  }

  /// @brief Cancels a sequence: a waiting one resolves with cancelled at once (on this thread); a running
  /// one at the next step boundary (the loop's next try_next_step, next_step or complete), which releases
  /// its blocks. False if it already resolved or was never submitted.
  bool cancel(sequence_id id) {
    std::unique_ptr<detail::sched_seq> s;
    {
      std::lock_guard lk(m_);
      for (auto& level : levels_) {
        auto it = detail::find_in_level(level, id);
        if (it == level.end()) continue;
        s = std::move(*it);
        level.erase(it);
        --waiting_;
        count(scheduler_errc::cancelled);
        break;
      }
      if (!s) {
        if (!running_ids_.contains(id)) return false;
        cancels_.push_back(id);
        return true;
      }
    }
    detail::sched_resolution r{std::move(s->done), std::nullopt,
                               detail::scheduler_error_ptr(scheduler_errc::cancelled)};
    r.deliver();
    return true;
  }

  /// @brief The next step, or empty when nothing is running or waiting. Ends cancelled and expired sequences
  /// first. Throws std::logic_error while a step is outstanding (not completed or failed).
  std::optional<step> try_next_step() {
    if (outstanding_ != 0)
      throw std::logic_error("frugal::scheduler::try_next_step: step " + std::to_string(outstanding_) +
                             " is outstanding; complete() or fail() it first");
    std::vector<detail::sched_resolution> out;
    std::optional<step> st;
    {
      std::lock_guard lk(m_);
      const std::int64_t now = ns(clock_.now());
      sweep(now, out);
      st = plan();
    }
    for (auto& r : out) r.deliver();
    if (st) outstanding_ = st->id();
    return st;
  }

  /// @brief Like try_next_step, but waits up to `timeout` (real time) for a sequence to arrive. Empty on
  /// timeout, or at once when the scheduler is closed and nothing is left.
  std::optional<step> next_step(std::chrono::nanoseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (std::optional<step> st = try_next_step()) return st;
      std::unique_lock lk(m_);
      if (waiting_ > 0 || running_count_ > 0 || !cancels_.empty()) continue;
      if (closed_) return std::nullopt;
      if (!cv_.wait_until(lk, until, [this] { return waiting_ > 0 || closed_; })) return std::nullopt;
    }
  }

  /// @brief Completes a step with the model's logits: logits_rows() rows of vocab_size floats, in the order
  /// of the entries that asked. Commits the entries' KV, samples each row with its sequence's parameters,
  /// streams the tokens, and resolves the sequences that finished or were cancelled or expired meanwhile.
  /// With `threads`, the rows are sampled in parallel on it (the same tokens: a row's sample depends only
  /// on its logits, its parameters and its seed); tokens stream and sequences resolve on the caller.
  /// Throws std::invalid_argument on a wrong size (the step stays outstanding), std::logic_error for a step
  /// that is not the outstanding one.
  void complete(const step& st, std::span<const float> logits, quant::executor* threads = nullptr) {
    check_outstanding(st, "complete");
    const std::size_t V = o_.vocab_size;
    if (V == 0)
      throw std::invalid_argument(
          "frugal::scheduler::complete: options.vocab_size is 0; pass the sampled tokens instead");
    if (logits.size() != st.logits_rows() * V)
      throw std::invalid_argument("frugal::scheduler::complete: got " + std::to_string(logits.size()) +
                                  " logits for " + std::to_string(st.logits_rows()) + " rows of vocab_size " +
                                  std::to_string(V));
    const auto sample = [&](std::size_t row, const detail::sched_seq& s) {
      return sample_token(logits.subspan(row * V, V), s.sampling,
                          sampling_uniform(s.sampling.seed, s.generated));
    };
    const std::int64_t now = ns(clock_.now());  // the step's time, before any sampling on either path
    const std::size_t rows = st.logits_rows();
    const std::size_t parts = threads ? std::min(threads->concurrency(), rows) : 1;
    if (parts <= 1) {
      finish_step(st, now, sample);
      return;
    }
    const std::vector<const detail::sched_seq*> of_row = sampled_sequences(st);
    std::vector<std::optional<kv_token>> picked(rows);
    threads->parallel_for(parts, [&](std::size_t p) {
      for (std::size_t r = rows * p / parts; r < rows * (p + 1) / parts; ++r)
        picked[r] = sample(r, *of_row[r]);
    });
    finish_step(st, now, [&](std::size_t row, const detail::sched_seq&) { return picked[row]; });
  }

  /// @brief Completes a step with the tokens the model sampled itself: one per entry that asked for logits.
  void complete_sampled(const step& st, std::span<const kv_token> tokens) {
    check_outstanding(st, "complete_sampled");
    if (tokens.size() != st.logits_rows())
      throw std::invalid_argument("frugal::scheduler::complete_sampled: got " +
                                  std::to_string(tokens.size()) + " tokens for " +
                                  std::to_string(st.logits_rows()) + " entries that sample");
    finish_step(
        st, ns(clock_.now()),
        [&](std::size_t row, const detail::sched_seq&) -> std::optional<kv_token> { return tokens[row]; });
  }

  /// @brief Fails every sequence of the step with the model's exception (no retry) and releases its blocks.
  void fail(const step& st, std::exception_ptr error) {
    check_outstanding(st, "fail");
    if (!error) throw std::invalid_argument("frugal::scheduler::fail: the exception_ptr is null");
    fail_step(st, std::move(error));
  }

  /// @brief Stops new submits (they resolve with closed); what is queued and running still runs, and
  /// next_step returns empty once nothing is left.
  void close() {
    {
      std::lock_guard lk(m_);
      closed_ = true;
    }
    cv_.notify_all();
  }

  /// @brief True when nothing is running or waiting.
  bool idle() const {
    std::lock_guard lk(m_);
    return waiting_ == 0 && running_count_ == 0;
  }

  scheduler_stats stats() const {
    scheduler_stats st;
    {
      std::lock_guard lk(m_);
      st.running = running_count_;
      st.waiting = waiting_;
      st.submitted = submitted_;
      st.finished_stop = finished_stop_;
      st.finished_length = finished_length_;
      st.failed = failed_;
      st.steps = steps_;
      st.prefill_tokens = prefill_tokens_;
      st.decode_tokens = decode_tokens_;
      st.generated_tokens = generated_tokens_;
      st.prefix_hit_tokens = prefix_hit_tokens_;
      st.preemptions = preemptions_;
      st.recomputed_tokens = recomputed_tokens_;
    }
    st.time_to_first_token = ttft_.snapshot();
    st.inter_token_latency = itl_.snapshot();
    return st;
  }

  const scheduler_options& options() const noexcept { return o_; }
  const Clock& clock() const noexcept { return clock_; }
  kv_cache& kv() noexcept { return kv_; }

 private:
  template <class Rep, class Period>
  static std::int64_t ns_of(std::chrono::duration<Rep, Period> d) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  }
  static std::int64_t ns(time_point t) { return ns_of(t.time_since_epoch()); }

  void check(const request& r, const callback& done) const {
    const auto bad = [](const std::string& what) {
      return std::invalid_argument("frugal::scheduler::submit: " + what);
    };
    if (r.prompt.empty()) throw bad("the prompt is empty");
    if (r.priority >= o_.priority_levels)
      throw bad("priority " + std::to_string(r.priority) + " is not below options.priority_levels " +
                std::to_string(o_.priority_levels));
    if (r.max_tokens == 0) throw bad("max_tokens must be positive");
    if (!(r.sampling.temperature >= 0) || !std::isfinite(r.sampling.temperature))
      throw bad("sampling.temperature must be finite and >= 0");
    if (!(r.sampling.top_p > 0 && r.sampling.top_p <= 1)) throw bad("sampling.top_p must be in (0, 1]");
    if (!done) throw bad("the callback is empty");
  }

  Clock clock_;
};

FRUGAL_END_NAMESPACE
