#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "frugal/detail/spin.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace quant {

/// @brief Where the CPU GEMMs run their parts when the options name one (`.threads = &pool`). The
/// library starts no thread of its own: implement this over the application's pool (TBB, OpenMP, a
/// server's workers), or use thread_pool. Without one, a GEMM runs on the calling thread alone with no
/// task machinery at all. Either way the results are the same bits: every split is along whole blocks
/// of the kernel, and each output element is computed by one task with the operations of one thread.
class executor {
 public:
  virtual ~executor() = default;
  /// @brief How many tasks can run at once; a GEMM splits into at most this many parts.
  virtual std::size_t concurrency() const noexcept = 0;
  /// @brief Runs task(0) ... task(count - 1), in any order, on any threads (the caller's included), and
  /// returns when all have finished. When tasks throw, the first exception is rethrown here once every
  /// started task has finished; tasks not yet started may then be skipped.
  virtual void parallel_for(std::size_t count, const std::function<void(std::size_t)>& task) = 0;
};

/// @brief A fixed set of threads for the GEMMs: `threads` in all, the caller of parallel_for being one
/// of them (so thread_pool(1) starts none and runs every task inline). One parallel_for runs at a time;
/// calls from several threads queue, and a task that calls parallel_for on its own pool runs that
/// inner loop inline instead of deadlocking. An idle thread spins for a few tens of microseconds before
/// it sleeps: the GEMMs of a model come back to back, and waking a sleeping thread costs about as much
/// (more in a VM).
class thread_pool final : public executor {
 public:
  explicit thread_pool(std::size_t threads) {
    if (threads == 0) throw std::invalid_argument("frugal::quant::thread_pool: threads must be >= 1, not 0");
    workers_.reserve(threads - 1);
    try {
      for (std::size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { worker(); });
    } catch (...) {
      shut_down();
      throw;
    }
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() override { shut_down(); }

  std::size_t concurrency() const noexcept override { return workers_.size() + 1; }

  void parallel_for(std::size_t count, const std::function<void(std::size_t)>& task) override {
    if (count == 0) return;
    if (count == 1 || workers_.empty() || inside() == this) {
      for (std::size_t i = 0; i < count; ++i) task(i);
      return;
    }
    const std::lock_guard<std::mutex> one_at_a_time(call_);
    {
      const std::lock_guard<std::mutex> lk(m_);
      task_ = &task;
      count_ = count;
      next_.store(0, std::memory_order_relaxed);
      busy_.store(workers_.size(), std::memory_order_relaxed);
      error_ = nullptr;
      generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    }
    work_.notify_all();
    take_tasks();
    for (int i = 0; i < spin_rounds && busy_.load(std::memory_order_acquire) != 0; ++i)
      ::frugal::detail::cpu_pause();
    std::exception_ptr error;
    {
      std::unique_lock<std::mutex> lk(m_);
      done_.wait(lk, [this] { return busy_.load(std::memory_order_relaxed) == 0; });
      task_ = nullptr;
      error = std::exchange(error_, nullptr);
    }
    if (error) std::rethrow_exception(error);
  }

 private:
  // The pool whose task this thread is running, if any: a nested parallel_for then runs inline.
  static thread_pool*& inside() noexcept {
    thread_local thread_pool* p = nullptr;
    return p;
  }

  void take_tasks() {
    thread_pool* const outer = std::exchange(inside(), this);
    for (;;) {
      const std::size_t i = next_.fetch_add(1, std::memory_order_relaxed);
      if (i >= count_) break;
      try {
        (*task_)(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lk(m_);
        if (!error_) error_ = std::current_exception();
        next_.store(count_, std::memory_order_relaxed);  // hand out no more
      }
    }
    inside() = outer;
  }

  void worker() {
    std::uint64_t seen = 0;
    for (;;) {
      for (int i = 0; i < spin_rounds && generation_.load(std::memory_order_acquire) == seen &&
                      !stop_.load(std::memory_order_relaxed);
           ++i)
        ::frugal::detail::cpu_pause();
      {
        std::unique_lock<std::mutex> lk(m_);
        work_.wait(lk, [&] {
          return stop_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_relaxed) != seen;
        });
        if (stop_.load(std::memory_order_relaxed)) return;
        seen = generation_.load(std::memory_order_relaxed);
      }
      take_tasks();
      const std::lock_guard<std::mutex> lk(m_);
      if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.notify_one();
    }
  }

  void shut_down() noexcept {
    {
      const std::lock_guard<std::mutex> lk(m_);
      stop_.store(true, std::memory_order_relaxed);
    }
    work_.notify_all();
    for (auto& t : workers_)
      if (t.joinable()) t.join();
  }

  std::mutex call_;
  std::mutex m_;
  std::condition_variable work_, done_;
  // Written under m_ before the workers are woken, read by them after they took m_: no race.
  const std::function<void(std::size_t)>* task_ = nullptr;
  std::size_t count_ = 0;
  std::atomic<std::size_t> next_{0};
  // Atomic so that an idle thread can spin on them; they change under m_ all the same.
  std::atomic<std::size_t> busy_{0};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  static constexpr int spin_rounds = 2000;  // about 20-50 us of pause instructions
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

namespace detail {

// Below this many multiply-adds a GEMM stays on the calling thread: waking a thread costs microseconds.
inline constexpr std::size_t min_parallel_macs = std::size_t{1} << 18;

// Runs body(m0, m1, n0, n1) over [0, m) x [0, n), split on `threads` (null: one call, here) along M or
// N, whichever has more whole blocks of the kernel (m_block rows, n_block columns), so every part is
// a run of whole blocks and computes each element as one thread would.
template <class Body>
void split_gemm(executor* threads, std::size_t m, std::size_t n, std::size_t k, std::size_t m_block,
                std::size_t n_block, Body&& body) {
  const std::size_t most = threads ? threads->concurrency() : 1;
  if (most <= 1 || m * n * std::max<std::size_t>(k, 1) < min_parallel_macs) return body(0, m, 0, n);
  const std::size_t mb = (m + m_block - 1) / m_block, nb = (n + n_block - 1) / n_block;
  const bool over_m = mb > nb;
  // Four parts per thread, taken in turn: a thread that wakes late takes fewer, instead of the whole
  // call waiting for its fixed share.
  const std::size_t blocks = over_m ? mb : nb, parts = std::min(most * 4, blocks);
  if (parts <= 1) return body(0, m, 0, n);
  threads->parallel_for(parts, [&](std::size_t p) {
    const std::size_t b0 = blocks * p / parts, b1 = blocks * (p + 1) / parts;
    if (over_m)
      body(b0 * m_block, std::min(b1 * m_block, m), std::size_t{0}, n);
    else
      body(std::size_t{0}, m, b0 * n_block, std::min(b1 * n_block, n));
  });
}

}  // namespace detail
}  // namespace quant
FRUGAL_END_NAMESPACE
