#pragma once

#include <algorithm>
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

#include "frugal/cost/histogram.hpp"
#include "frugal/kv/kv_cache.hpp"
#include "frugal/namespace.hpp"
#include "frugal/scheduler/detail/sequence.hpp"
#include "frugal/scheduler/errors.hpp"
#include "frugal/scheduler/options.hpp"
#include "frugal/scheduler/step.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

// What a scheduler is, apart from its clock: the queues, the running sequences, the planning of steps and
// their completion, on nanoseconds the scheduler reads from its clock. The lock and loop-thread rules are
// scheduler's (see its comment).
class scheduler_core {
 protected:
  scheduler_core(kv_cache& kv, const scheduler_options& o)
      : kv_(kv),
        o_(validated(o)),
        block_tokens_(kv.options().block_tokens),
        blocks_total_(kv.blocks_total()),
        levels_(o_.priority_levels) {}

  using seq_ptr = std::unique_ptr<sched_seq>;

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

  // The most tokens the sequence's KV ever holds (its last generated token is never computed) fit the
  // context and the whole budget.
  bool fits_alone(const sched_seq& s) const {
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

  static void resolve_error(sched_seq& s, scheduler_errc c, std::vector<sched_resolution>& out) {
    s.ended = true;
    out.push_back({std::move(s.done), std::nullopt, scheduler_error_ptr(c)});
  }

  static bool in(const std::vector<sequence_id>& sorted, sequence_id id) {
    return std::binary_search(sorted.begin(), sorted.end(), id);
  }

  // Why a sequence must end now, if it must. Under the lock (cancels_).
  std::optional<scheduler_errc> why_end(const sched_seq& s, std::int64_t now,
                                        const std::vector<sequence_id>& cancels) const {
    if (in(cancels, s.id) || s.stop_when.stop_requested()) return scheduler_errc::cancelled;
    if (s.deadline <= now) return scheduler_errc::deadline_exceeded;
    return std::nullopt;
  }

  // Ends the cancelled and expired sequences, waiting and running. Under the lock, on the loop thread.
  void sweep(std::int64_t now, std::vector<sched_resolution>& out) {
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

  void fail_step(const step& st, std::exception_ptr error) {
    outstanding_ = 0;
    std::vector<sched_resolution> out;
    for (sched_seq* s : st.seqs_) {
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

  void remove_ended(std::vector<sequence_id>& gone) {
    std::erase_if(running_, [&gone](const seq_ptr& s) {
      if (!s->ended) return false;
      gone.push_back(s->id);
      return true;
    });
  }

  // Tokens of `want` that the sequence's KV can take now, from its last block's free slots and the free and
  // evictable blocks.
  std::size_t fitting(const sched_seq& s, std::size_t want) const {
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
    sched_level& level = levels_[v->priority];
    insert_in_level(level, std::move(v));
  }

  struct planned {
    sched_seq* s;
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
      sched_seq& s = *running_[i];
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
        const sched_seq& v = *running_.back();
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
      sched_level* level = nullptr;
      for (std::size_t l = levels_.size(); l-- > 0;)
        if (!levels_[l].empty()) {
          level = &levels_[l];
          break;
        }
      sched_seq& s = *level->front();
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
                                 [](const seq_ptr& a, const seq_ptr& b) { return outranks(*a, *b); });
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
        const sched_seq& s = *x.s;
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

  void append(sched_seq& s, std::size_t n) {
    const kv_append_result r = kv_.append(s.kv, std::span<const kv_token>(s.tokens).subspan(s.computed, n));
    if (!r) throw std::logic_error("frugal::scheduler: an append that fitting() allowed was refused");
  }

  /// The sequence of each logits row of the step, in row order.
  static std::vector<const sched_seq*> sampled_sequences(const step& st) {
    std::vector<const sched_seq*> rows;
    rows.reserve(st.entries_.size());
    for (std::size_t k = 0; k < st.entries_.size(); ++k)
      if (st.entries_[k].logits) rows.push_back(st.seqs_[k]);
    return rows;
  }

  template <class Pick>
  void finish_step(const step& st, std::int64_t now, Pick&& pick) {
    outstanding_ = 0;
    std::vector<sequence_id> cancels;
    {
      std::lock_guard lk(m_);
      cancels.swap(cancels_);
    }
    std::sort(cancels.begin(), cancels.end());
    std::vector<sched_resolution> out;
    std::uint64_t prefill = 0, decode = 0, generated = 0, stops = 0, lengths = 0;
    scheduler_failures failed{};
    std::size_t row = 0;
    for (std::size_t k = 0; k < st.entries_.size(); ++k) {
      const step_entry& e = st.entries_[k];
      sched_seq& s = *st.seqs_[k];
      (e.decode ? decode : prefill) += e.tokens.size();
      const std::size_t my_row = e.logits ? row++ : 0;
      s.computed += e.tokens.size();
      kv_.commit(s.kv);
      if (const auto why = why_end(s, now, cancels)) {
        ++(*why == scheduler_errc::cancelled ? failed.cancelled : failed.deadline_exceeded);
        end(s, std::nullopt, scheduler_error_ptr(*why), out);
        continue;
      }
      if (!e.logits) continue;
      const std::optional<kv_token> tok = pick(my_row, s);
      if (!tok) {
        ++failed.bad_logits;
        end(s, std::nullopt, scheduler_error_ptr(scheduler_errc::bad_logits), out);
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
        end(s, finished_generation(s, finish_reason::stop, *tok), nullptr, out);
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
        end(s, finished_generation(s, finish_reason::length, std::nullopt), nullptr, out);
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

  void end(sched_seq& s, std::optional<generation> value, std::exception_ptr error,
           std::vector<sched_resolution>& out) {
    kv_.release(s.kv);
    s.ended = true;
    out.push_back({std::move(s.done), std::move(value), std::move(error)});
  }

  kv_cache& kv_;
  const scheduler_options o_;
  const std::size_t block_tokens_;
  const std::size_t blocks_total_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  // Under m_:
  std::vector<sched_level> levels_;
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

}  // namespace detail
FRUGAL_END_NAMESPACE
