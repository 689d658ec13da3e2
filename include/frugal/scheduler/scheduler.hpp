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
class scheduler {
 public:
  using clock_type = Clock;
  using time_point = typename Clock::time_point;
  using request = basic_generation_request<time_point>;
  /// @brief Receives the generation or the error, once; must not throw.
  using callback = detail::generation_callback;

  /// @brief Validates the options (std::invalid_argument naming the field).
  explicit scheduler(kv_cache& kv, scheduler_options options = {}, Clock clock = {})
      : kv_(kv),
        o_(validated(options)),
        clock_(std::move(clock)),
        block_tokens_(kv.options().block_tokens),
        blocks_total_(kv.blocks_total()),
        levels_(o_.priority_levels) {}
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
    if (st) outstanding_ = st->id_;
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
  /// Throws std::invalid_argument on a wrong size (the step stays outstanding), std::logic_error for a step
  /// that is not the outstanding one.
  void complete(const step& st, std::span<const float> logits) {
    check_outstanding(st, "complete");
    const std::size_t V = o_.vocab_size;
    if (V == 0)
      throw std::invalid_argument(
          "frugal::scheduler::complete: options.vocab_size is 0; pass the sampled tokens instead");
    if (logits.size() != st.logits_rows_ * V)
      throw std::invalid_argument("frugal::scheduler::complete: got " + std::to_string(logits.size()) +
                                  " logits for " + std::to_string(st.logits_rows_) + " rows of vocab_size " +
                                  std::to_string(V));
    finish_step(st, [&](std::size_t row, const detail::sched_seq& s) {
      return sample_token(logits.subspan(row * V, V), s.sampling,
                          sampling_uniform(s.sampling.seed, s.generated));
    });
  }

  /// @brief Completes a step with the tokens the model sampled itself: one per entry that asked for logits.
  void complete_sampled(const step& st, std::span<const kv_token> tokens) {
    check_outstanding(st, "complete_sampled");
    if (tokens.size() != st.logits_rows_)
      throw std::invalid_argument("frugal::scheduler::complete_sampled: got " +
                                  std::to_string(tokens.size()) + " tokens for " +
                                  std::to_string(st.logits_rows_) + " entries that sample");
    finish_step(st, [&](std::size_t row, const detail::sched_seq&) -> std::optional<kv_token> {
      return tokens[row];
    });
  }

  /// @brief Fails every sequence of the step with the model's exception (no retry) and releases its blocks.
  void fail(const step& st, std::exception_ptr error) {
    check_outstanding(st, "fail");
    if (!error) throw std::invalid_argument("frugal::scheduler::fail: the exception_ptr is null");
    outstanding_ = 0;
    std::vector<detail::sched_resolution> out;
    for (detail::sched_seq* s : st.seqs_) {
      kv_.release(s->kv);
      s->ended = true;
      out.push_back({std::move(s->done), std::nullopt, error});
    }
    std::vector<sequence_id> gone;
    remove_ended(gone);
    {
      std::lock_guard lk(m_);
      for (sequence_id id : gone) running_ids_.erase(id);
      running_count_ -= gone.size();
      failed_.model_error += gone.size();
      ++steps_;
    }
    for (auto& r : out) r.deliver();
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
  using seq_ptr = std::unique_ptr<detail::sched_seq>;

  static scheduler_options validated(const scheduler_options& o) {
    const auto fail = [](const std::string& what) {
      return std::invalid_argument("frugal::scheduler: options." + what);
    };
    if (o.max_running == 0) throw fail("max_running must be positive");
    if (o.max_waiting == 0) throw fail("max_waiting must be positive (the waiting queue is bounded)");
    if (o.priority_levels == 0) throw fail("priority_levels must be positive");
    if (o.step_tokens < o.max_running)
      throw fail("step_tokens " + std::to_string(o.step_tokens) + " is below max_running " +
                 std::to_string(o.max_running) + ": every running sequence's decode token must fit a step");
    return o;
  }

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

  // The most tokens the sequence's KV ever holds (its last generated token is never computed) fit the
  // context and the whole budget.
  bool fits_alone(const detail::sched_seq& s) const {
    if (o_.max_context != 0 && s.prompt_len > o_.max_context) return false;
    std::size_t peak = s.prompt_len + std::min(s.max_tokens, std::size_t(1) << 40) - 1;
    if (o_.max_context != 0) peak = std::min(peak, o_.max_context);
    return (peak + block_tokens_ - 1) / block_tokens_ <= blocks_total_;
  }

  void check_outstanding(const step& st, const char* who) const {
    if (outstanding_ == 0 || st.id_ != outstanding_)
      throw std::logic_error(std::string("frugal::scheduler::") + who + ": step " + std::to_string(st.id_) +
                             " is not the outstanding step (" +
                             (outstanding_ ? std::to_string(outstanding_) : std::string("none")) + ")");
  }

  void count(scheduler_errc c) noexcept {
    switch (c) {
      case scheduler_errc::deadline_exceeded:
        ++failed_.deadline_exceeded;
        break;
      case scheduler_errc::cancelled:
        ++failed_.cancelled;
        break;
      case scheduler_errc::queue_full:
        ++failed_.queue_full;
        break;
      case scheduler_errc::too_long:
        ++failed_.too_long;
        break;
      case scheduler_errc::closed:
        ++failed_.closed;
        break;
      case scheduler_errc::bad_logits:
        ++failed_.bad_logits;
        break;
    }
  }

  static void resolve_error(detail::sched_seq& s, scheduler_errc c,
                            std::vector<detail::sched_resolution>& out) {
    s.ended = true;
    out.push_back({std::move(s.done), std::nullopt, detail::scheduler_error_ptr(c)});
  }

  static bool in(const std::vector<sequence_id>& sorted, sequence_id id) {
    return std::binary_search(sorted.begin(), sorted.end(), id);
  }

  // Why a sequence must end now, if it must. Under the lock (cancels_).
  std::optional<scheduler_errc> why_end(const detail::sched_seq& s, std::int64_t now,
                                        const std::vector<sequence_id>& cancels) const {
    if (in(cancels, s.id) || s.stop_when.stop_requested()) return scheduler_errc::cancelled;
    if (s.deadline <= now) return scheduler_errc::deadline_exceeded;
    return std::nullopt;
  }

  // Ends the cancelled and expired sequences, waiting and running. Under the lock, on the loop thread.
  void sweep(std::int64_t now, std::vector<detail::sched_resolution>& out) {
    std::vector<sequence_id> cancels;
    cancels.swap(cancels_);
    std::sort(cancels.begin(), cancels.end());
    for (auto& level : levels_) {
      for (auto it = level.begin(); it != level.end();) {
        if (const auto why = why_end(**it, now, {})) {
          count(*why);
          resolve_error(**it, *why, out);
          it = level.erase(it);
          --waiting_;
        } else {
          ++it;
        }
      }
    }
    for (auto& s : running_) {
      if (const auto why = why_end(*s, now, cancels)) {
        kv_.release(s->kv);
        count(*why);
        resolve_error(*s, *why, out);
        running_ids_.erase(s->id);
        --running_count_;
      }
    }
    std::vector<sequence_id> gone;
    remove_ended(gone);
  }

  void remove_ended(std::vector<sequence_id>& gone) {
    std::erase_if(running_, [&gone](const seq_ptr& s) {
      if (!s->ended) return false;
      gone.push_back(s->id);
      return true;
    });
  }

  // Tokens of `want` that the sequence's KV can take now, from its last block's free slots and the free and
  // evictable blocks.
  std::size_t fitting(const detail::sched_seq& s, std::size_t want) const {
    if (want == 0) return 0;
    const std::size_t B = block_tokens_, len = s.computed;
    const std::size_t room = ((len + B - 1) / B + kv_.blocks_available()) * B - len;
    std::size_t n = std::min(want, room);
    while (n > 0 && kv_.blocks_needed(s.kv, n) > kv_.blocks_available()) --n;  // a copy-on-write block
    return n;
  }

  // Takes back the blocks of running_[j] and requeues it, generated tokens kept. Under the lock.
  void preempt(std::size_t j) {
    seq_ptr v = std::move(running_[j]);
    running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(j));
    kv_.release(v->kv);
    v->computed_before_preemption = v->computed;
    v->computed = 0;
    ++v->preemptions;
    ++preemptions_;
    running_ids_.erase(v->id);
    --running_count_;
    ++waiting_;
    detail::sched_level& level = levels_[v->priority];
    detail::insert_in_level(level, std::move(v));
  }

  struct planned {
    detail::sched_seq* s;
    std::size_t n;
  };

  // Builds the next step (see the class comment). Under the lock, on the loop thread.
  std::optional<step> plan() {
    std::size_t budget = o_.step_tokens;
    std::size_t reserved = 0;  // decode tokens of running sequences not yet reached
    for (const auto& s : running_) reserved += s->tokens.size() - s->computed == 1;
    std::vector<planned> dec, pre;
    bool preempted = false;
    for (std::size_t i = 0; i < running_.size();) {
      detail::sched_seq& s = *running_[i];
      const std::size_t rem = s.tokens.size() - s.computed;
      const bool d = rem == 1;
      if (d) --reserved;
      const std::size_t want = d ? 1 : std::min(rem, budget - reserved);
      std::size_t n = 0;
      while (want > 0) {
        const std::size_t fit = fitting(s, want);
        if (fit == want || (!d && fit > 0)) {
          n = fit;
          break;
        }
        if (running_.size() <= i + 1) break;
        const detail::sched_seq& v = *running_.back();
        if (v.tokens.size() - v.computed == 1) --reserved;
        preempt(running_.size() - 1);
        preempted = true;
      }
      if (n == 0) {
        if (d) {
          preempt(i);
          preempted = true;
        } else {
          ++i;
        }
        continue;
      }
      append(s, n);
      (d ? dec : pre).push_back({&s, n});
      budget -= n;
      ++i;
    }
    while (!preempted && running_.size() < o_.max_running && budget > 0 && waiting_ > 0) {
      detail::sched_level* level = nullptr;
      for (std::size_t l = levels_.size(); l-- > 0;)
        if (!levels_[l].empty()) {
          level = &levels_[l];
          break;
        }
      detail::sched_seq& s = *level->front();
      if (kv_.blocks_available() == 0) break;
      const kv_open_result r = kv_.open(s.tokens, s.salt);
      s.kv = r.id;
      s.computed = r.cached_tokens;
      const std::size_t n = fitting(s, std::min(s.tokens.size() - s.computed, budget));
      if (n == 0) {
        kv_.release(s.kv);
        s.computed = 0;
        break;
      }
      prefix_hit_tokens_ += r.cached_tokens;
      if (s.admitted) {
        recomputed_tokens_ += s.computed_before_preemption > r.cached_tokens
                                  ? s.computed_before_preemption - r.cached_tokens
                                  : 0;
      } else {
        s.admitted = true;
        s.cached_tokens = r.cached_tokens;
      }
      seq_ptr p = std::move(level->front());
      level->pop_front();
      --waiting_;
      ++running_count_;
      running_ids_.insert(p->id);
      append(*p, n);
      pre.push_back({p.get(), n});
      budget -= n;
      auto at = std::upper_bound(running_.begin(), running_.end(), p,
                                 [](const seq_ptr& a, const seq_ptr& b) { return detail::outranks(*a, *b); });
      running_.insert(at, std::move(p));
    }
    if (dec.empty() && pre.empty()) return std::nullopt;
    step st;
    st.id_ = ++step_seq_;
    st.entries_.reserve(dec.size() + pre.size());
    st.seqs_.reserve(dec.size() + pre.size());
    st.tokens_.reserve(o_.step_tokens - budget);
    for (const auto* list : {&dec, &pre}) {
      for (const planned& x : *list) {
        const detail::sched_seq& s = *x.s;
        const auto first = s.tokens.begin() + static_cast<std::ptrdiff_t>(s.computed);
        st.tokens_.insert(st.tokens_.end(), first, first + static_cast<std::ptrdiff_t>(x.n));
        const bool logits = s.computed + x.n == s.tokens.size();
        st.entries_.push_back({.sequence = s.id,
                               .kv = s.kv,
                               .tokens = {},
                               .first_position = s.computed,
                               .logits = logits,
                               .decode = list == &dec});
        st.seqs_.push_back(x.s);
        st.logits_rows_ += logits;
        st.decodes_ += st.entries_.back().decode;
      }
    }
    std::size_t at = 0;
    for (std::size_t k = 0; k < st.entries_.size(); ++k) {
      const std::size_t n = k < dec.size() ? dec[k].n : pre[k - dec.size()].n;
      st.entries_[k].tokens = std::span<const kv_token>(st.tokens_).subspan(at, n);
      at += n;
    }
    return st;
  }

  void append(detail::sched_seq& s, std::size_t n) {
    const kv_append_result r = kv_.append(s.kv, std::span<const kv_token>(s.tokens).subspan(s.computed, n));
    if (!r) throw std::logic_error("frugal::scheduler: an append that fitting() allowed was refused");
  }

  template <class Pick>
  void finish_step(const step& st, Pick&& pick) {
    outstanding_ = 0;
    const std::int64_t now = ns(clock_.now());
    std::vector<sequence_id> cancels;
    {
      std::lock_guard lk(m_);
      cancels.swap(cancels_);
    }
    std::sort(cancels.begin(), cancels.end());
    std::vector<detail::sched_resolution> out;
    std::uint64_t prefill = 0, decode = 0, generated = 0, stops = 0, lengths = 0;
    scheduler_failures failed{};
    std::size_t row = 0;
    for (std::size_t k = 0; k < st.entries_.size(); ++k) {
      const step_entry& e = st.entries_[k];
      detail::sched_seq& s = *st.seqs_[k];
      (e.decode ? decode : prefill) += e.tokens.size();
      const std::size_t my_row = e.logits ? row++ : 0;
      s.computed += e.tokens.size();
      kv_.commit(s.kv);
      if (const auto why = why_end(s, now, cancels)) {
        ++(*why == scheduler_errc::cancelled ? failed.cancelled : failed.deadline_exceeded);
        end(s, std::nullopt, detail::scheduler_error_ptr(*why), out);
        continue;
      }
      if (!e.logits) continue;
      const std::optional<kv_token> tok = pick(my_row, s);
      if (!tok) {
        ++failed.bad_logits;
        end(s, std::nullopt, detail::scheduler_error_ptr(scheduler_errc::bad_logits), out);
        continue;
      }
      ++generated;
      ++s.generated;
      const std::int64_t since = s.ttft < 0 ? s.arrival : s.last_token;
      (s.ttft < 0 ? ttft_ : itl_).record(static_cast<std::uint64_t>(std::max<std::int64_t>(0, now - since)));
      if (s.ttft < 0) s.ttft = now - s.arrival;
      s.last_token = now;
      if (std::find(s.stop.begin(), s.stop.end(), *tok) != s.stop.end()) {
        ++stops;
        end(s, detail::finished_generation(s, finish_reason::stop, *tok), nullptr, out);
        continue;
      }
      s.tokens.push_back(*tok);
      if (s.on_token) {
        try {
          s.on_token(*tok);
        } catch (...) {
          ++failed.model_error;
          end(s, std::nullopt, std::current_exception(), out);
          continue;
        }
      }
      if (s.generated >= s.max_tokens || (o_.max_context != 0 && s.tokens.size() > o_.max_context)) {
        ++lengths;
        end(s, detail::finished_generation(s, finish_reason::length, std::nullopt), nullptr, out);
      }
    }
    std::vector<sequence_id> gone;
    remove_ended(gone);
    {
      std::lock_guard lk(m_);
      for (sequence_id id : gone) running_ids_.erase(id);
      running_count_ -= gone.size();
      ++steps_;
      prefill_tokens_ += prefill;
      decode_tokens_ += decode;
      generated_tokens_ += generated;
      finished_stop_ += stops;
      finished_length_ += lengths;
      failed_.cancelled += failed.cancelled;
      failed_.deadline_exceeded += failed.deadline_exceeded;
      failed_.bad_logits += failed.bad_logits;
      failed_.model_error += failed.model_error;
      // Cancels of sequences that just ended are moot; the rest wait for the next boundary.
      for (sequence_id id : cancels)
        if (running_ids_.contains(id)) cancels_.push_back(id);
    }
    for (auto& r : out) r.deliver();
  }

  void end(detail::sched_seq& s, std::optional<generation> value, std::exception_ptr error,
           std::vector<detail::sched_resolution>& out) {
    kv_.release(s.kv);
    s.ended = true;
    out.push_back({std::move(s.done), std::move(value), std::move(error)});
  }

  kv_cache& kv_;
  const scheduler_options o_;
  Clock clock_;
  const std::size_t block_tokens_;
  const std::size_t blocks_total_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  // Under m_:
  std::vector<detail::sched_level> levels_;
  std::size_t waiting_ = 0;
  std::size_t running_count_ = 0;
  std::unordered_set<sequence_id> running_ids_;
  std::vector<sequence_id> cancels_;
  bool closed_ = false;
  sequence_id next_id_ = 1;
  std::uint64_t submitted_ = 0, finished_stop_ = 0, finished_length_ = 0, steps_ = 0;
  std::uint64_t prefill_tokens_ = 0, decode_tokens_ = 0, generated_tokens_ = 0;
  std::uint64_t prefix_hit_tokens_ = 0, preemptions_ = 0, recomputed_tokens_ = 0;
  scheduler_failures failed_{};
  // The loop thread's:
  std::vector<seq_ptr> running_;  // rank order
  std::uint64_t step_seq_ = 0;
  std::uint64_t outstanding_ = 0;
  cost::log_linear_histogram ttft_{3'600'000'000'000};
  cost::log_linear_histogram itl_{3'600'000'000'000};
};

FRUGAL_END_NAMESPACE
