// The generation task of frugal_batch_job (generate.hpp). Records are {"id": ..., "prompt": "..."} ("text"
// is taken too, so an embedding corpus serves); results are {"ids": [...], "text": "...", "finish_reason":
// "stop"|"length", "prompt_tokens": N}, or {"error": "..."} for a record without a prompt or one too long
// for the model.
//
// The batch is as large as the KV budget allows: a sequence is admitted while the blocks it needs at its
// full length (its prompt and max_tokens) fit beside those of the sequences running, up to max_running.
// The scheduler may still preempt by recompute when a prompt is longer than the ones seen so far; native
// precision is batch-invariant, so neither the batch nor a recompute changes a token.
#include "generate.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "llama.hpp"

namespace batch_job {
namespace {

using clock_type = std::chrono::steady_clock;

// Tokens a result line holds: its ids and the stop token that ended it.
std::uint64_t tokens_of(const nlohmann::json& result) {
  const auto ids = result.find("ids");
  if (ids == result.end() || !ids->is_array()) return 0;
  const auto reason = result.find("finish_reason");
  return ids->size() + (reason != result.end() && *reason == "stop" ? 1 : 0);
}

// The output's lines and their tokens.
std::pair<std::uint64_t, std::uint64_t> count_output(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::uint64_t lines = 0, tokens = 0;
  for (std::string l; std::getline(f, l);) {
    if (l.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(l, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("result") || !j["result"].contains("ids")) continue;
    ++lines;
    tokens += tokens_of(j["result"]);
  }
  return {lines, tokens};
}

// generation.json in the checkpoint directory: tokens generated and lines finished over every attempt,
// rewritten in place after every step (no fsync: it must survive the process, which the page cache does;
// a machine that dies loses at most what it wrote since its last flush, and the count reads low).
class progress_file {
 public:
  struct values {
    std::uint64_t generated_tokens = 0, finished_lines = 0, attempts = 0, redone_booked = 0;
  };
  progress_file() = default;
  explicit progress_file(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error(path + ": cannot be opened: " + std::string(std::strerror(errno)));
    char buf[size] = {};
    const ssize_t n = ::pread(fd_, buf, size - 1, 0);
    if (n > 0) {
      const nlohmann::json j = nlohmann::json::parse(std::string(buf, std::size_t(n)), nullptr, false);
      if (j.is_object()) {
        v_.generated_tokens = j.value("generated_tokens", std::uint64_t{0});
        v_.finished_lines = j.value("finished_lines", std::uint64_t{0});
        v_.attempts = j.value("attempts", std::uint64_t{0});
        v_.redone_booked = j.value("redone_booked", std::uint64_t{0});
      }
    }
  }
  progress_file(const progress_file&) = delete;
  progress_file& operator=(const progress_file&) = delete;
  ~progress_file() {
    if (fd_ >= 0) ::close(fd_);
  }
  values& get() { return v_; }
  void write() {
    std::string s = nlohmann::json{{"generated_tokens", v_.generated_tokens},
                                   {"finished_lines", v_.finished_lines},
                                   {"attempts", v_.attempts},
                                   {"redone_booked", v_.redone_booked}}
                        .dump();
    s.resize(size - 1, ' ');  // one fixed-size write: a kill leaves the old text or the new one
    s += '\n';
    if (::pwrite(fd_, s.data(), s.size(), 0) != ssize_t(s.size()))
      throw std::runtime_error(path_ + ": write failed: " + std::string(std::strerror(errno)));
  }

 private:
  static constexpr std::size_t size = 160;
  std::string path_;
  int fd_ = -1;
  values v_;
};

class llama_generator final : public generator {
 public:
  explicit llama_generator(const generation_options& o)
      : o_(o),
        m_(llama::model::load(o.model, {.weights = llama::parse_precision(o.precision),
                                        .kv_budget_bytes = o.kv_budget_mb << 20})),
        pool_(o.threads),
        sched_(m_->kv(), {.max_running = o.max_running,
                          .max_waiting = o.max_running,
                          .step_tokens = std::max<std::size_t>(512, o.max_running),
                          .max_context = m_->cfg().context,
                          .vocab_size = m_->cfg().vocab}),
        salt_(frugal::kv_salt::of(o.model + "#" + o.precision)) {
    if (o.max_tokens == 0) throw std::invalid_argument("--max-tokens must be positive");
    stops_.push_back(m_->tokenizer().eos());
    if (o.chat) {
      const std::int32_t eot = m_->tokenizer().find(std::string(m_->chat_template().end_of_turn()));
      if (eot >= 0 && eot != stops_[0]) stops_.push_back(eot);
    }
    const auto ks = m_->kv().stats();
    capacity_blocks_ = ks.blocks_total;
    block_tokens_ = ks.block_tokens;
  }

  std::string describe() const override {
    return "generation: " + o_.model + " (" + o_.precision + "), max_tokens " +
           std::to_string(o_.max_tokens) +
           (o_.temperature > 0 ? ", temperature " + std::to_string(o_.temperature) : ", greedy");
  }
  std::size_t max_running() const override { return o_.max_running; }
  double busy_seconds() const override { return busy_s_; }
  std::uint64_t steps() const override { return steps_; }
  std::uint64_t prefill_tokens() const override { return prefill_; }
  std::uint64_t generated_tokens() const override { return generated_; }

  std::size_t room() override {
    if (held_ >= o_.max_running) return 0;
    // The next prompt is taken to be as long as the longest so far.
    return held_ == 0 || reserved_ + blocks_for(longest_prompt_) <= capacity_blocks_ ? 1 : 0;
  }

  void add(const frugal::job::record& r, done_function done) override {
    start();
    auto it = r.request.find("prompt");
    if (it == r.request.end()) it = r.request.find("text");
    if (it == r.request.end() || !it->is_string()) {
      done({{"error", "no \"prompt\" string"}});
      return;
    }
    std::vector<std::int32_t> prompt = encode(it->get<std::string>());
    if (prompt.empty()) {
      done({{"error", "the prompt has no tokens"}});
      return;
    }
    if (prompt.size() >= m_->cfg().context) {
      done({{"error", "the prompt has " + std::to_string(prompt.size()) + " tokens; the model's context is " +
                          std::to_string(m_->cfg().context)}});
      return;
    }
    longest_prompt_ = std::max(longest_prompt_, prompt.size());
    const std::size_t blocks = blocks_for(prompt.size());
    const std::size_t prompt_tokens = prompt.size();
    frugal::scheduler<>::request req{
        .prompt = std::move(prompt),
        .sampling = {.temperature = o_.temperature, .top_p = o_.top_p, .seed = o_.seed + r.line},
        .max_tokens = o_.max_tokens,
        .stop = stops_,
        .salt = salt_};
    reserved_ += blocks;
    ++held_;
    sched_.submit(std::move(req), [this, blocks, prompt_tokens,
                                   done = std::move(done)](frugal::result<frugal::generation> g) {
      reserved_ -= blocks;
      --held_;
      if (!g) {
        try {
          std::rethrow_exception(g.error());
        } catch (const std::exception& e) {
          done({{"error", e.what()}});
        }
        return;
      }
      const frugal::generation& gen = *g;
      ++finished_;
      done({{"ids", gen.tokens},
            {"text", m_->tokenizer().decode(gen.tokens)},
            {"finish_reason", frugal::to_string(gen.reason)},
            {"prompt_tokens", prompt_tokens}});
    });
  }

  bool step() override {
    std::optional<frugal::step> st = sched_.try_next_step();
    if (!st) {
      if (held_ > 0)
        throw std::logic_error("the scheduler has no step for " + std::to_string(held_) + " sequences");
      return false;
    }
    const auto t0 = clock_type::now();
    std::vector<float> logits;
    try {
      logits = m_->run_step(*st, &pool_);
    } catch (...) {
      sched_.fail(*st, std::current_exception());
      throw;
    }
    if (o_.slow_step.count()) std::this_thread::sleep_for(o_.slow_step);
    prefill_ += st->tokens() - st->decode_tokens();
    sched_.complete(*st, logits, &pool_);
    busy_s_ += std::chrono::duration<double>(clock_type::now() - t0).count();
    ++steps_;
    const std::uint64_t g = sched_.stats().generated_tokens;
    progress_->get().generated_tokens += g - generated_;
    progress_->get().finished_lines += finished_;
    finished_ = 0;
    generated_ = g;
    progress_->write();
    return true;
  }

  generation_accounting accounting() override {
    generation_accounting a = at_start_;
    if (!progress_) progress_ = std::make_unique<progress_file>(o_.checkpoint_dir + "/generation.json");
    const auto [lines, tokens] = count_output(o_.output);
    (void)lines;
    a.generated_tokens = progress_->get().generated_tokens;
    a.output_tokens = tokens;
    a.redone_tokens = a.generated_tokens > tokens ? a.generated_tokens - tokens : 0;
    a.attempts = progress_->get().attempts;
    return a;
  }

 private:
  std::size_t blocks_for(std::size_t prompt) const {
    return (prompt + o_.max_tokens + block_tokens_ - 1) / block_tokens_;
  }

  std::vector<std::int32_t> encode(const std::string& text) const {
    const auto& tok = m_->tokenizer();
    if (!o_.chat) return tok.encode(text, {.parse_special = false, .add_special = true});
    return m_->encode_chat(text);
  }

  // At the first record, under the job's lock: what the attempts before this one generated and lost. The
  // runner has cut the output back to its checkpoint by now, so the output holds the checkpointed lines.
  void start() {
    if (progress_) return;
    progress_ = std::make_unique<progress_file>(o_.checkpoint_dir + "/generation.json");
    auto& v = progress_->get();
    const auto [lines, tokens] = count_output(o_.output);
    const std::uint64_t redone = v.generated_tokens > tokens ? v.generated_tokens - tokens : 0;
    at_start_.redone_at_start = redone > v.redone_booked ? redone - v.redone_booked : 0;
    at_start_.redone_lines_at_start = v.finished_lines > lines ? v.finished_lines - lines : 0;
    v.redone_booked = redone;
    v.finished_lines = lines;  // the lost lines are booked now; the count starts again from the output
    ++v.attempts;
    progress_->write();
  }

  generation_options o_;
  std::unique_ptr<llama::model> m_;
  frugal::quant::thread_pool pool_;
  frugal::scheduler<> sched_;
  frugal::kv_salt salt_;
  std::vector<frugal::kv_token> stops_;
  std::size_t capacity_blocks_ = 0, block_tokens_ = 16, reserved_ = 0, held_ = 0, longest_prompt_ = 0;
  std::uint64_t steps_ = 0, prefill_ = 0, generated_ = 0, finished_ = 0;
  double busy_s_ = 0;
  std::unique_ptr<progress_file> progress_;
  generation_accounting at_start_;
};

}  // namespace

std::unique_ptr<generator> make_generator(const generation_options& o) {
  return std::make_unique<llama_generator>(o);
}

}  // namespace batch_job
