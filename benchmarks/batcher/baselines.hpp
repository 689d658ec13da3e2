#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

// The rivals frugal::batcher is timed against, written the way a server usually starts out.
namespace baseline {

// A mutex and a condition variable around a std::deque of (request, promise); one request per model call.
template <class Request, class Result>
class naive_queue {
 public:
  std::future<Result> submit(Request r) {
    std::promise<Result> p;
    std::future<Result> f = p.get_future();
    {
      std::lock_guard g(m_);
      q_.emplace_back(std::move(r), std::move(p));
    }
    cv_.notify_one();
    return f;
  }
  // Empty once closed and drained.
  std::optional<std::pair<Request, std::promise<Result>>> pop() {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return !q_.empty() || closed_; });
    if (q_.empty()) return std::nullopt;
    auto item = std::move(q_.front());
    q_.pop_front();
    return item;
  }
  void close() {
    {
      std::lock_guard g(m_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::pair<Request, std::promise<Result>>> q_;
  bool closed_ = false;
};

// The same queue, but the worker takes up to max_batch requests per model call once that many are
// queued (or the producers are done): a plain batch-by-count batcher.
template <class Request, class Result>
class count_batcher {
 public:
  explicit count_batcher(std::size_t max_batch) : max_batch_(max_batch) {}
  std::future<Result> submit(Request r) {
    std::promise<Result> p;
    std::future<Result> f = p.get_future();
    bool full;
    {
      std::lock_guard g(m_);
      q_.emplace_back(std::move(r), std::move(p));
      full = q_.size() >= max_batch_;
    }
    if (full) cv_.notify_one();
    return f;
  }
  // Fills `requests` and `promises` with one batch; false once closed and drained.
  bool pop(std::vector<Request>& requests, std::vector<std::promise<Result>>& promises) {
    requests.clear();
    promises.clear();
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return q_.size() >= max_batch_ || closed_; });
    if (q_.empty()) return false;
    while (!q_.empty() && requests.size() < max_batch_) {
      requests.push_back(std::move(q_.front().first));
      promises.push_back(std::move(q_.front().second));
      q_.pop_front();
    }
    return true;
  }
  void close() {
    {
      std::lock_guard g(m_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::size_t max_batch_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::pair<Request, std::promise<Result>>> q_;
  bool closed_ = false;
};

}  // namespace baseline
