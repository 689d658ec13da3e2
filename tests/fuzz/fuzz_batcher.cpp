// A random single-threaded sequence of submits, cancellations (by id and by stop_token), deadlines, clock
// moves, try_next_batch pulls, fulfills, fails, per-item fails, dropped batches, sweeps and close, on a
// manual clock, against a model of the queue. Property: every request resolves exactly once, with the
// cause the model predicts, batches are cut as documented, and the stats add up after every step.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <vector>

#include "frugal/batcher.hpp"
#include "frugal/clock.hpp"

namespace {

const bool tracing = std::getenv("FUZZ_TRACE") != nullptr;
#define TRACE(...) (tracing ? (void)std::fprintf(stderr, __VA_ARGS__) : (void)0)

[[noreturn]] void fail(const char* what, long long a = 0, long long b = 0) {
  std::fprintf(stderr, "fuzz_batcher: %s (%lld vs %lld)\n", what, a, b);
  std::abort();
}

using batcher_t = frugal::batcher<int, int, frugal::fixed_window, frugal::manual_clock>;
using frugal::batch_errc;

struct model_error : std::runtime_error {
  model_error() : std::runtime_error("model failed") {}
};

// What a request resolved with, as the callback saw it; kind 0 value, 1 batch_error, 2 model_error.
struct seen_outcome {
  int kind = -1;
  int value = 0;
  batch_errc code{};
};

struct record {
  std::size_t level = 0;
  std::uint64_t weight = 1;
  std::int64_t arrival = 0, deadline = 0;  // deadline: INT64_MAX for none
  std::unique_ptr<std::stop_source> stop;
  frugal::request_id id = 0;
  bool queued = false;
  int resolutions = 0;
  seen_outcome got;
  std::optional<seen_outcome> want;
};

struct held {
  batcher_t::batch b;
  std::vector<int> items;  // record indices, in batch order
  std::vector<bool> done;
};

constexpr std::int64_t never = INT64_MAX;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  FuzzedDataProvider fdp(bytes, size);
  frugal::batcher_options o;
  o.window = std::chrono::nanoseconds(fdp.ConsumeIntegralInRange<int>(0, 20));
  o.max_batch = fdp.ConsumeIntegralInRange<std::size_t>(1, 6);
  o.max_batch_cost = fdp.ConsumeBool() ? 0 : fdp.ConsumeIntegralInRange<std::uint64_t>(1, 10);
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0)
    for (std::size_t v : {1, 2, 3, 4, 6, 8})
      if (fdp.ConsumeBool()) o.allowed_sizes.push_back(v);
  o.priority_levels = fdp.ConsumeIntegralInRange<std::size_t>(1, 3);
  o.max_queued = fdp.ConsumeIntegralInRange<std::size_t>(0, 8);
  o.max_queued_cost = fdp.ConsumeBool() ? 0 : fdp.ConsumeIntegralInRange<std::uint64_t>(1, 12);
  const bool block = fdp.ConsumeBool();
  o.on_overflow = block ? frugal::overflow::block : frugal::overflow::reject;
  o.block_timeout = std::chrono::nanoseconds(0);  // single-threaded: nobody would ever make room
  const bool options_ok =
      (o.allowed_sizes.empty() || o.allowed_sizes.front() <= o.max_batch) &&
      !(o.max_queued_cost != 0 && o.max_batch_cost != 0 && o.max_queued_cost < o.max_batch_cost);
  std::size_t cap = o.max_batch;
  for (std::size_t v : o.allowed_sizes)
    if (v <= o.max_batch) cap = v;

  frugal::manual_clock clock;
  std::deque<record> recs;
  std::vector<held> batches;
  {
    std::optional<batcher_t> bt;
    try {
      bt.emplace(o, clock);
    } catch (const std::invalid_argument&) {
      if (options_ok) fail("valid options rejected");
      return 0;
    }
    if (!options_ok) fail("invalid options accepted");
    batcher_t& b = *bt;

    std::vector<std::deque<int>> levels(o.priority_levels);
    std::size_t live = 0;
    std::uint64_t live_cost = 0, handed = 0, completed = 0;
    std::uint64_t failed[8] = {};  // by batch_errc, model_error in [0]
    bool closed = false;
    auto now = [&] { return clock.now().time_since_epoch().count(); };

    auto resolve = [&](int i, seen_outcome w) {
      if (recs[i].want) fail("the model resolved a request twice", i);
      recs[i].want = w;
      if (w.kind == 1)
        ++failed[static_cast<int>(w.code)];
      else if (w.kind == 2)
        ++failed[0];
      else
        ++completed;
    };
    auto unqueue = [&](int i) {
      recs[i].queued = false;
      --live;
      live_cost -= recs[i].weight;
    };
    auto ineligible = [&](int i) -> std::optional<batch_errc> {
      if (recs[i].deadline <= now()) return batch_errc::deadline_exceeded;
      if (recs[i].stop && recs[i].stop->stop_requested()) return batch_errc::cancelled;
      return std::nullopt;
    };
    auto purge_fronts = [&] {
      for (auto& l : levels)
        while (!l.empty()) {
          const auto why = ineligible(l.front());
          if (!why) break;
          unqueue(l.front());
          resolve(l.front(), {1, 0, *why});
          l.pop_front();
        }
    };
    // Returns whether a batch is due now, and when one will be otherwise.
    auto evaluate = [&](std::int64_t& when) {
      purge_fronts();
      when = never;
      if (live == 0) return false;
      if (closed || live >= cap || (o.max_batch_cost != 0 && live_cost >= o.max_batch_cost)) return true;
      std::int64_t oldest = never;
      for (auto& l : levels)
        if (!l.empty()) oldest = std::min(oldest, recs[l.front()].arrival);
      if (now() - oldest >= o.window.count()) return true;
      when = oldest + o.window.count();
      for (auto& l : levels)
        if (!l.empty()) when = std::min(when, recs[l.front()].deadline);
      return false;
    };
    auto check_all = [&] {
      for (std::size_t i = 0; i < recs.size(); ++i) {
        const record& r = recs[i];
        if (r.resolutions != (r.want ? 1 : 0))
          fail("resolution count", static_cast<long long>(i), r.resolutions);
        if (!r.want) continue;
        if (r.got.kind != r.want->kind) fail("outcome kind", r.got.kind, r.want->kind);
        if (r.got.kind == 1 && r.got.code != r.want->code)
          fail("failure cause", static_cast<int>(r.got.code), static_cast<int>(r.want->code));
        if (r.got.kind == 0 && r.got.value != r.want->value) fail("result", r.got.value, r.want->value);
      }
      const frugal::batcher_stats s = b.stats();
      std::size_t in_flight = 0, in_flight_batches = 0;
      std::uint64_t want_completed = completed, want_model = failed[0];
      for (auto& h : batches) {
        const auto p = static_cast<std::size_t>(std::count(h.done.begin(), h.done.end(), false));
        in_flight += p;
        in_flight_batches += p != 0;
      }
      if (s.submitted != s.completed + s.failed.total() + s.queue_depth + s.in_flight)
        fail("stats do not add up");
      if (s.queue_depth != live || s.queued_cost != live_cost) fail("queue depth", s.queue_depth, live);
      if (s.in_flight != in_flight || s.in_flight_batches != in_flight_batches)
        fail("in flight", s.in_flight, in_flight);
      if (s.batches != handed) fail("batches", s.batches, handed);
      if (s.completed != want_completed) fail("completed", s.completed, want_completed);
      const std::uint64_t by_cause[8] = {s.failed.model_error,
                                         s.failed.deadline_exceeded,
                                         s.failed.cancelled,
                                         s.failed.queue_full,
                                         s.failed.closed,
                                         s.failed.abandoned,
                                         s.failed.result_count_mismatch,
                                         s.failed.timeout};
      for (int k = 0; k < 8; ++k)
        if (by_cause[k] != (k == 0 ? want_model : failed[k]))
          fail("failures by cause", k, static_cast<long long>(by_cause[k]));
    };
    auto callback_for = [&](int i) {
      return batcher_t::callback([&recs, i](frugal::result<int> out) {
        record& r = recs[i];
        ++r.resolutions;
        if (out) {
          r.got = {0, *out, {}};
        } else if (auto code = out.code()) {
          r.got = {1, 0, *code};
        } else {
          try {
            std::rethrow_exception(out.error());
          } catch (const model_error&) {
            r.got = {2, 0, {}};
          } catch (...) {
            r.got = {3, 0, {}};
          }
        }
      });
    };

    while (fdp.remaining_bytes() > 0) {
      const int op = fdp.ConsumeIntegralInRange<int>(0, 13);
      TRACE("t=%lld op %d live %zu\n", static_cast<long long>(now()), op, live);
      switch (op) {
        case 0:
        case 1:
        case 2: {
          const std::size_t prio = fdp.ConsumeIntegralInRange<std::size_t>(
              0, o.priority_levels - (fdp.ConsumeIntegralInRange<int>(0, 15) != 0));
          const std::uint64_t w = fdp.ConsumeIntegralInRange<std::uint64_t>(0, 5);
          const int dl = fdp.ConsumeIntegralInRange<int>(-1, 30);
          const int stop = fdp.ConsumeIntegralInRange<int>(0, 3);
          const int i = static_cast<int>(recs.size());
          recs.emplace_back();
          record& r = recs.back();
          r.level = prio;
          r.weight = w;
          r.arrival = now();
          r.deadline = dl < 0 ? never : now() + dl;
          batcher_t::submit_options so{.priority = prio, .weight = w};
          if (dl >= 0) so.deadline = clock.now() + std::chrono::nanoseconds(dl);
          if (stop != 0) {
            r.stop = std::make_unique<std::stop_source>();
            if (stop == 1) r.stop->request_stop();
            so.stop = r.stop->get_token();
          }
          const bool bad = prio >= o.priority_levels || (o.max_batch_cost != 0 && w > o.max_batch_cost) ||
                           (o.max_queued_cost != 0 && w > o.max_queued_cost);
          try {
            r.id = b.submit(i, callback_for(i), std::move(so));
          } catch (const std::invalid_argument&) {
            if (!bad) fail("a valid submit threw");
            recs.pop_back();
            break;
          }
          if (bad) fail("an invalid submit was accepted");
          const bool room = (o.max_queued == 0 || live < o.max_queued) &&
                            (o.max_queued_cost == 0 || live_cost + w <= o.max_queued_cost);
          if (closed)
            resolve(i, {1, 0, batch_errc::closed});
          else if (stop == 1)
            resolve(i, {1, 0, batch_errc::cancelled});
          else if (r.deadline <= now())
            resolve(i, {1, 0, batch_errc::deadline_exceeded});
          else if (!room)
            resolve(i, {1, 0, block ? batch_errc::timeout : batch_errc::queue_full});
          else {
            r.queued = true;
            ++live;
            live_cost += w;
            levels[prio].push_back(i);
          }
          break;
        }
        case 3: {
          if (recs.empty()) break;
          const int i = fdp.ConsumeIntegralInRange<int>(0, static_cast<int>(recs.size()) - 1);
          if (fdp.ConsumeBool()) {
            const bool want = recs[i].queued;
            if (b.cancel(recs[i].id) != want) fail("cancel", !want, want);
            if (want) {
              unqueue(i);
              auto& l = levels[recs[i].level];
              l.erase(std::find(l.begin(), l.end(), i));
              resolve(i, {1, 0, batch_errc::cancelled});
            }
          } else if (recs[i].stop) {
            recs[i].stop->request_stop();  // noticed at the batcher's next look at the queue
          }
          break;
        }
        case 4:
          clock.advance(std::chrono::nanoseconds(fdp.ConsumeIntegralInRange<int>(0, 12)));
          break;
        case 5:
        case 6: {
          std::int64_t when;
          const bool due = evaluate(when);
          std::vector<int> take;
          std::size_t bucket = 0;
          if (due) {
            // Count the eligible requests a batch may hold, highest level first, FIFO within one.
            std::size_t n = 0;
            std::uint64_t cost = 0;
            bool stop = false;
            for (std::size_t l = levels.size(); l-- > 0 && !stop;)
              for (int i : levels[l]) {
                if (ineligible(i)) continue;
                if (n == cap ||
                    (o.max_batch_cost != 0 && n != 0 && cost + recs[i].weight > o.max_batch_cost)) {
                  stop = true;
                  break;
                }
                ++n;
                cost += recs[i].weight;
              }
            std::size_t count = n;
            bucket = n;
            if (n != 0 && !o.allowed_sizes.empty()) {
              auto it = std::upper_bound(o.allowed_sizes.begin(), o.allowed_sizes.end(), n);
              if (it == o.allowed_sizes.begin())
                bucket = o.allowed_sizes.front();
              else
                count = bucket = *std::prev(it);
            }
            for (std::size_t l = levels.size(); l-- > 0 && take.size() < count;)
              while (take.size() < count && !levels[l].empty()) {
                const int i = levels[l].front();
                levels[l].pop_front();
                unqueue(i);
                if (const auto why = ineligible(i))
                  resolve(i, {1, 0, *why});
                else
                  take.push_back(i);
              }
            purge_fronts();
          }
          std::optional<batcher_t::batch> got = b.try_next_batch();
          if (bool(got) != !take.empty()) fail("try_next_batch: a batch or not", bool(got), !take.empty());
          if (got) {
            ++handed;
            if (got->size() != take.size()) fail("batch size", got->size(), take.size());
            for (std::size_t k = 0; k < take.size(); ++k)
              if (got->requests()[k] != take[k]) fail("batch order", got->requests()[k], take[k]);
            if (got->bucket() != bucket) fail("bucket", got->bucket(), bucket);
            std::uint64_t cost = 0;
            for (int i : take) cost += recs[i].weight;
            if (got->cost() != cost) fail("batch cost", got->cost(), cost);
            if (got->id() != handed) fail("batch id", got->id(), handed);
            TRACE("  got batch of %zu\n", take.size());
            batches.push_back(held{std::move(*got), take, std::vector<bool>(take.size(), false)});
          }
          break;
        }
        case 7:
        case 8: {
          if (batches.empty()) break;
          held& h = batches[fdp.ConsumeIntegralInRange<std::size_t>(0, batches.size() - 1)];
          const std::size_t pending =
              static_cast<std::size_t>(std::count(h.done.begin(), h.done.end(), false));
          const int how = fdp.ConsumeIntegralInRange<int>(0, 5);
          const std::size_t k = fdp.ConsumeIntegralInRange<std::size_t>(0, h.items.size());
          TRACE("  batch of %zu pending %zu how %d k %zu\n", h.items.size(), pending, how, k);
          try {
            if (how == 0 || how == 1) {
              // The right count, or one too many or too few.
              const bool right = how == 0;
              std::vector<int> results;
              for (int i : h.items) results.push_back(i * 10 + 1);
              if (!right) {
                if (fdp.ConsumeBool() && !results.empty())
                  results.pop_back();
                else
                  results.push_back(0);
              }
              h.b.fulfill(std::move(results));
              if (pending == 0) fail("fulfill on a resolved batch did not throw");
              if (!right) fail("fulfill with a wrong count did not throw");
              for (std::size_t j = 0; j < h.items.size(); ++j)
                if (!h.done[j]) resolve(h.items[j], {0, h.items[j] * 10 + 1, {}}), h.done[j] = true;
            } else if (how == 2) {
              h.b.fail(std::make_exception_ptr(model_error()));
              if (pending == 0) fail("fail on a resolved batch did not throw");
              for (std::size_t j = 0; j < h.items.size(); ++j)
                if (!h.done[j]) resolve(h.items[j], {2, 0, {}}), h.done[j] = true;
            } else if (how == 3 || how == 4) {
              if (how == 3)
                h.b.fail(k, std::make_exception_ptr(model_error()));
              else
                h.b.fulfill(k, k < h.items.size() ? h.items[k] * 10 + 1 : 0);
              if (k >= h.items.size() || h.done[k]) fail("a per-item resolve of a bad index did not throw");
              resolve(h.items[k],
                      how == 3 ? seen_outcome{2, 0, {}} : seen_outcome{0, h.items[k] * 10 + 1, {}});
              h.done[k] = true;
            } else {
              // Dropped without a resolution: what is left fails with abandoned.
              for (std::size_t j = 0; j < h.items.size(); ++j)
                if (!h.done[j]) resolve(h.items[j], {1, 0, batch_errc::abandoned}), h.done[j] = true;
              { batcher_t::batch gone = std::move(h.b); }
            }
          } catch (const frugal::batch_error& e) {
            if (e.code() != batch_errc::result_count_mismatch || pending == 0 || how != 1)
              fail("unexpected batch_error");
            for (std::size_t j = 0; j < h.items.size(); ++j)
              if (!h.done[j])
                resolve(h.items[j], {1, 0, batch_errc::result_count_mismatch}), h.done[j] = true;
          } catch (const std::out_of_range&) {
            if (!(pending != 0 && k >= h.items.size() && (how == 3 || how == 4)))
              fail("unexpected out_of_range");
          } catch (const std::logic_error&) {
            const bool item_done = (how == 3 || how == 4) && k < h.items.size() && h.done[k];
            if (!(pending == 0 || item_done)) fail("unexpected logic_error");
          }
          break;
        }
        case 9: {
          std::size_t want = 0;
          for (auto& l : levels)
            for (auto it = l.begin(); it != l.end();) {
              if (const auto why = ineligible(*it)) {
                unqueue(*it);
                resolve(*it, {1, 0, *why});
                ++want;
                it = l.erase(it);
              } else {
                ++it;
              }
            }
          if (b.sweep() != want) fail("sweep count");
          break;
        }
        case 10: {
          std::int64_t when;
          const bool due = evaluate(when);
          const auto got = b.next_due();
          if (live == 0) {
            if (got) fail("next_due on an empty queue");
          } else {
            const std::int64_t want = due ? now() : when;
            if (!got || got->time_since_epoch().count() != want)
              fail("next_due", got ? got->time_since_epoch().count() : -1, want);
          }
          break;
        }
        case 11: {
          const bool drain = fdp.ConsumeBool();
          closed = true;
          if (!drain)
            for (auto& l : levels) {
              for (int i : l) unqueue(i), resolve(i, {1, 0, batch_errc::closed});
              l.clear();
            }
          b.close(drain ? frugal::drain::yes : frugal::drain::no);
          if (!b.closed()) fail("closed()");
          break;
        }
        case 12:
          if (!batches.empty() && fdp.ConsumeBool()) {
            // Forget a fully resolved batch, as a worker would.
            auto it = std::find_if(batches.begin(), batches.end(), [](const held& h) {
              return std::find(h.done.begin(), h.done.end(), false) == h.done.end();
            });
            if (it != batches.end()) batches.erase(it);
          }
          break;
        default:
          break;
      }
      check_all();
    }
    // Destroying the batcher fails what is queued with closed; batches outlive it.
    for (auto& l : levels)
      for (int i : l) unqueue(i), resolve(i, {1, 0, batch_errc::closed});
  }
  for (auto& h : batches)
    for (std::size_t j = 0; j < h.items.size(); ++j)
      if (!h.done[j]) {
        record& r = recs[h.items[j]];
        r.want = seen_outcome{1, 0, batch_errc::abandoned};
      }
  batches.clear();
  for (std::size_t i = 0; i < recs.size(); ++i) {
    const record& r = recs[i];
    if (r.resolutions != 1)
      fail("a request did not resolve exactly once", static_cast<long long>(i), r.resolutions);
    if (r.got.kind != r.want->kind || (r.got.kind == 1 && r.got.code != r.want->code))
      fail("final outcome", static_cast<long long>(i));
  }
  return 0;
}
