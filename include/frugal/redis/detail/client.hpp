#pragma once

// The connection behind frugal::redis: a hiredis context guarded by a mutex, pipelined commands with
// timeouts, reconnects and the circuit breaker, SIGPIPE kept off the calling thread, and the counters that
// redis_client_stats reports. Included by frugal/redis/client.hpp.

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "frugal/cost/histogram.hpp"
#include "frugal/namespace.hpp"
#include "frugal/redis/client.hpp"
#include "frugal/redis/errors.hpp"
#include "frugal/redis/options.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace detail {

struct redis_reply_deleter {
  void operator()(redisReply* r) const noexcept {
    if (r) freeReplyObject(r);
  }
};
using redis_reply_ptr = std::unique_ptr<redisReply, redis_reply_deleter>;

struct redis_context_deleter {
  void operator()(redisContext* c) const noexcept {
    if (c) redisFree(c);
  }
};
using redis_context_ptr = std::unique_ptr<redisContext, redis_context_deleter>;

// hiredis writes with write(2), so a peer that closed its end would raise SIGPIPE and, by default, end
// the process. A library must not change the process's disposition: SIGPIPE is blocked on this thread
// for the call, and one it raised is taken off the pending set before it is unblocked.
class sigpipe_guard {
 public:
  sigpipe_guard() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~sigpipe_guard() {
    if (!blocked_) return;
    if (!was_pending_) {
      sigset_t pending;
      sigemptyset(&pending);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  sigpipe_guard(const sigpipe_guard&) = delete;
  sigpipe_guard& operator=(const sigpipe_guard&) = delete;

 private:
  sigset_t pipe_{}, old_{};
  bool was_pending_ = false, blocked_ = false;
};

inline timeval to_timeval(std::chrono::milliseconds d) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  return timeval{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}

/// One command: its arguments, binary-safe.
using redis_command = std::vector<std::string_view>;

struct redis_result {
  redis_errc fault = redis_errc::none;
  std::vector<redis_reply_ptr> replies;  // one per command when fault == none
  explicit operator bool() const noexcept { return fault == redis_errc::none; }
};

// The breaker and the connections. Thread-safe: each connection is used under its own mutex; the
// breaker's few fields under another.
template <class Clock>
class redis_client {
 public:
  redis_client(const redis_options& o, Clock clock)
      : opts_(o),
        clock_(std::move(clock)),
        slots_(o.connections),
        backoff_(o.breaker_backoff),
        rng_(std::random_device{}()) {}

  /// Sends the commands in one pipeline and reads every reply: one round trip.
  redis_result run(std::span<const redis_command> cmds) {
    redis_result res;
    if (cmds.empty()) return res;
    if (!allow()) {
      skips_.fetch_add(1, std::memory_order_relaxed);
      res.fault = redis_errc::skipped;
      return res;
    }
    slot& s = acquire();
    std::unique_lock lock(s.m, std::adopt_lock);
    sigpipe_guard guard;
    if (!s.ctx) {
      res.fault = connect(s);
      if (!res) {
        failed(res.fault);
        return res;
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const redis_command& c : cmds) {
      argv.clear();
      lens.clear();
      for (std::string_view a : c) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      if (redisAppendCommandArgv(s.ctx.get(), static_cast<int>(argv.size()), argv.data(), lens.data()) !=
          REDIS_OK) {
        res.fault = drop(s, "a command could not be queued");
        failed(res.fault);
        return res;
      }
    }
    res.replies.reserve(cmds.size());
    for (std::size_t i = 0; i < cmds.size(); ++i) {
      void* r = nullptr;
      errno = 0;
      if (redisGetReply(s.ctx.get(), &r) != REDIS_OK || !r) {
        const bool timed_out = s.ctx->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
        res.replies.clear();
        res.fault = drop(s, timed_out ? "no reply within command_timeout" : s.ctx->errstr,
                         timed_out ? redis_errc::timeout : redis_errc::connection);
        failed(res.fault);
        return res;
      }
      res.replies.emplace_back(static_cast<redisReply*>(r));
      if (res.replies.back()->type == REDIS_REPLY_ERROR) {
        reply_errors_.fetch_add(1, std::memory_order_relaxed);
        note(std::string("error reply: ") + std::string(res.replies.back()->str, res.replies.back()->len));
      }
    }
    lock.unlock();
    const auto ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    latency_.record(static_cast<std::uint64_t>(ns.count()));
    round_trips_.fetch_add(1, std::memory_order_relaxed);
    commands_.fetch_add(cmds.size(), std::memory_order_relaxed);
    succeeded();
    return res;
  }

  breaker_state state() const {
    std::lock_guard lock(breaker_mutex_);
    return state_;
  }

  redis_client_stats stats() const {
    redis_client_stats st;
    st.round_trips = round_trips_.load(std::memory_order_relaxed);
    st.commands = commands_.load(std::memory_order_relaxed);
    st.timeouts = timeouts_.load(std::memory_order_relaxed);
    st.connection_errors = connection_errors_.load(std::memory_order_relaxed);
    st.auth_failures = auth_failures_.load(std::memory_order_relaxed);
    st.reply_errors = reply_errors_.load(std::memory_order_relaxed);
    st.breaker_skips = skips_.load(std::memory_order_relaxed);
    st.connects = connects_.load(std::memory_order_relaxed);
    {
      std::lock_guard lock(breaker_mutex_);
      st.breaker = state_;
      st.breaker_opens = opens_;
      st.breaker_backoff = state_ == breaker_state::closed ? std::chrono::nanoseconds(0) : backoff_;
      st.last_error = last_error_;
    }
    const cost::histogram_snapshot h = latency_.snapshot();
    using ns = std::chrono::nanoseconds;
    if (h.count) {
      st.latency_mean = ns(static_cast<std::int64_t>(h.sum / h.count));
      st.latency_p50 = ns(static_cast<std::int64_t>(h.value_at(0.5)));
      st.latency_p99 = ns(static_cast<std::int64_t>(h.value_at(0.99)));
      st.latency_max = ns(static_cast<std::int64_t>(h.value_at(1.0)));
    }
    return st;
  }

 private:
  struct slot {
    std::mutex m;
    redis_context_ptr ctx;
  };

  // A free connection, locked; or, with all busy, the thread's own one, waited for.
  slot& acquire() {
    const std::size_t n = slots_.size();
    const std::size_t start = std::hash<std::thread::id>{}(std::this_thread::get_id()) % n;
    for (std::size_t i = 0; i < n; ++i) {
      slot& s = slots_[(start + i) % n];
      if (s.m.try_lock()) return s;
    }
    slots_[start].m.lock();
    return slots_[start];
  }

  redis_errc connect(slot& s) {
    const timeval ct = to_timeval(opts_.connect_timeout);
    redis_context_ptr c(opts_.unix_socket.empty()
                            ? redisConnectWithTimeout(opts_.host.c_str(), opts_.port, ct)
                            : redisConnectUnixWithTimeout(opts_.unix_socket.c_str(), ct));
    if (!c || c->err) {
      connection_errors_.fetch_add(1, std::memory_order_relaxed);
      note(std::string("connect failed: ") + (c ? c->errstr : "out of memory"));
      return redis_errc::connection;
    }
    if (redisSetTimeout(c.get(), to_timeval(opts_.command_timeout)) != REDIS_OK) {
      connection_errors_.fetch_add(1, std::memory_order_relaxed);
      note("setting command_timeout failed");
      return redis_errc::connection;
    }
    if (!opts_.auth.empty()) {
      std::vector<const char*> argv{"AUTH"};
      std::vector<std::size_t> lens{4};
      if (!opts_.auth.user.empty()) {
        argv.push_back(opts_.auth.user.data());
        lens.push_back(opts_.auth.user.size());
      }
      argv.push_back(opts_.auth.password.data());
      lens.push_back(opts_.auth.password.size());
      errno = 0;
      redis_reply_ptr r(static_cast<redisReply*>(
          redisCommandArgv(c.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
      if (!r) {
        const bool timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
        (timed_out ? timeouts_ : connection_errors_).fetch_add(1, std::memory_order_relaxed);
        note(timed_out ? "AUTH: no reply within command_timeout" : "AUTH: connection lost");
        return timed_out ? redis_errc::timeout : redis_errc::connection;
      }
      if (r->type == REDIS_REPLY_ERROR) {
        // The server's words name no credential, but they are not kept either: "refused" is enough.
        auth_failures_.fetch_add(1, std::memory_order_relaxed);
        note("AUTH refused (check the user and password; they are not logged)");
        return redis_errc::auth;
      }
    }
    s.ctx = std::move(c);
    connects_.fetch_add(1, std::memory_order_relaxed);
    return redis_errc::none;
  }

  redis_errc drop(slot& s, std::string_view why, redis_errc f = redis_errc::connection) {
    (f == redis_errc::timeout ? timeouts_ : connection_errors_).fetch_add(1, std::memory_order_relaxed);
    note(std::string(why));
    s.ctx.reset();  // a context that timed out or broke is unusable: a later call reconnects
    return f;
  }

  void note(std::string what) {
    std::lock_guard lock(breaker_mutex_);
    last_error_ = std::move(what);
  }

  std::chrono::nanoseconds jittered(std::chrono::nanoseconds d) {
    if (opts_.breaker_jitter == 0) return d;
    std::uniform_real_distribution<double> u(1 - opts_.breaker_jitter, 1 + opts_.breaker_jitter);
    return std::chrono::nanoseconds(static_cast<std::int64_t>(static_cast<double>(d.count()) * u(rng_)));
  }

  bool allow() {
    std::lock_guard lock(breaker_mutex_);
    switch (state_) {
      case breaker_state::closed:
        return true;
      case breaker_state::half_open:
        return false;  // one probe at a time
      case breaker_state::open:
        if (clock_.now() < open_until_) return false;
        state_ = breaker_state::half_open;
        return true;
    }
    return false;
  }

  void succeeded() {
    std::lock_guard lock(breaker_mutex_);
    state_ = breaker_state::closed;
    failures_ = 0;
    backoff_ = opts_.breaker_backoff;
  }

  void failed(redis_errc) {
    std::lock_guard lock(breaker_mutex_);
    ++failures_;
    if (state_ == breaker_state::half_open) {
      backoff_ = std::min<std::chrono::nanoseconds>(2 * backoff_, opts_.breaker_max_backoff);
    } else if (state_ != breaker_state::closed || failures_ < opts_.breaker_failures) {
      return;
    }
    state_ = breaker_state::open;
    ++opens_;
    open_until_ = clock_.now() + std::chrono::duration_cast<typename Clock::duration>(jittered(backoff_));
  }

  redis_options opts_;
  Clock clock_;
  std::vector<slot> slots_;
  mutable std::mutex breaker_mutex_;
  breaker_state state_ = breaker_state::closed;
  std::uint32_t failures_ = 0;
  std::chrono::nanoseconds backoff_;
  typename Clock::time_point open_until_{};
  std::uint64_t opens_ = 0;
  std::string last_error_;
  std::mt19937_64 rng_;
  std::atomic<std::uint64_t> round_trips_{0}, commands_{0}, timeouts_{0}, connection_errors_{0},
      auth_failures_{0}, reply_errors_{0}, skips_{0}, connects_{0};
  cost::log_linear_histogram latency_{1'000'000'000};
};

}  // namespace detail
FRUGAL_END_NAMESPACE
