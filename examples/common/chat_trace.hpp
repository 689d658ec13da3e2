#pragma once

// A synthetic chat trace, deterministic by seed (described in benchmarks/llm/README.md):
// - arrivals: a Poisson process of `rate_per_s` requests per second;
// - each request carries one of `system_prompts` system prompts, drawn Zipf(zipf_s) once per conversation;
// - an arrival starts a new conversation with probability `new_conversation` (or when no open
//   conversation may continue), else it is the next user turn of an open conversation, drawn uniformly
//   among those with fewer than `max_turns` turns whose last turn arrived at least `think_s` before;
// - a turn's prompt is the conversation so far: the system prompt, every earlier user turn and its answer,
//   and the new user turn. User turns are Debian fortunes (real text); the earlier answers in the history
//   are fortunes too, so that the prompts do not depend on what a model generated;
// - the answer length (tokens to generate) is lognormal with median `answer_median` and log-sd
//   `answer_sigma`, rounded and clipped to [answer_min, answer_max];
// - with `repeat_share` > 0, that share of new conversations opens with one of `questions` popular
//   questions (fortunes too), drawn Zipf(question_zipf_s): a persona asked a popular question gets the
//   same prompt every time, and its answer length is drawn once per (system prompt, question), so that
//   such requests repeat exactly (what a response cache can serve). With repeat_share 0 the trace does
//   not depend on the question options.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "corpus.hpp"

namespace chat_trace {

struct message {
  std::string role;
  std::string content;
};

struct request {
  double arrival_s = 0;
  std::size_t conversation = 0;
  std::size_t turn = 0;  ///< 0 for a conversation's first request
  std::size_t system = 0;
  std::vector<message> messages;  ///< system, user, assistant, ..., user
  std::size_t answer_tokens = 0;
  bool repeated = false;  ///< opens its conversation with a popular question
};

struct options {
  std::size_t requests = 48;
  double rate_per_s = 6.0;
  std::size_t system_prompts = 4;
  double zipf_s = 1.2;
  double new_conversation = 0.35;
  std::size_t max_turns = 4;
  double think_s = 1.5;
  double answer_median = 24;
  double answer_sigma = 0.6;
  std::size_t answer_min = 4, answer_max = 96;
  std::uint64_t seed = 1;
  double repeat_share = 0;
  std::size_t questions = 8;
  double question_zipf_s = 1.0;
  std::string fortunes_dir = "/usr/share/games/fortunes";
};

// Four assistant personas of 40 to 60 tokens; system_prompts > 4 repeats them with a number.
inline std::string system_prompt(std::size_t i) {
  static const char* base[] = {
      "You are a helpful assistant for a public library. Answer questions about books, authors and opening "
      "hours briefly and politely. If you do not know an answer, say so and suggest asking the front desk.",
      "You are a friendly tutor who explains ideas to curious students. Use short sentences, give one "
      "example "
      "for every idea, and end each answer with a question that checks what the student understood.",
      "You are a customer support agent for a small company that sells bicycles. Be concise, be kind, never "
      "promise refunds, and ask for the order number when a customer reports a problem with a delivery.",
      "You are a witty companion who comments on quotations. Reply to every quotation with a short remark, "
      "a related thought, and, when it fits, a gentle joke. Keep every reply under three sentences."};
  const std::string s = base[i % 4];
  return i < 4 ? s : s + " (persona " + std::to_string(i) + ")";
}

inline std::vector<request> make(const options& o) {
  if (o.requests == 0 || !(o.rate_per_s > 0) || o.system_prompts == 0 || o.max_turns == 0 ||
      !(o.new_conversation > 0 && o.new_conversation <= 1) || o.answer_min == 0 ||
      o.answer_min > o.answer_max || !(o.repeat_share >= 0 && o.repeat_share <= 1) ||
      (o.repeat_share > 0 && o.questions == 0) || !(o.question_zipf_s >= 0))
    throw std::invalid_argument(
        "chat_trace::make: requests, rate_per_s, system_prompts, max_turns and answer_min must be positive, "
        "new_conversation in (0, 1], answer_min <= answer_max, repeat_share in [0, 1], questions > 0 when "
        "repeat_share > 0, question_zipf_s >= 0");
  // Two fortunes per request at most (its user turn, the answer standing for it in later turns).
  const std::vector<std::string> text =
      examples::sample_fortunes(o.fortunes_dir, 2 * o.requests, o.seed, 20, 160);
  std::size_t next_text = 0;
  std::mt19937_64 rng(o.seed);
  std::exponential_distribution<double> gap(o.rate_per_s);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::lognormal_distribution<double> answer(std::log(o.answer_median), o.answer_sigma);
  std::vector<double> zipf(o.system_prompts);
  for (std::size_t i = 0; i < zipf.size(); ++i)
    zipf[i] = 1.0 / std::pow(static_cast<double>(i + 1), o.zipf_s);
  std::discrete_distribution<std::size_t> pick_system(zipf.begin(), zipf.end());
  std::vector<std::string> questions;
  std::discrete_distribution<std::size_t> pick_question;
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> question_answer;
  if (o.repeat_share > 0) {
    questions = examples::sample_fortunes(o.fortunes_dir, o.questions, o.seed + 1, 20, 160);
    std::vector<double> w(questions.size());
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = 1.0 / std::pow(static_cast<double>(i + 1), o.question_zipf_s);
    pick_question = std::discrete_distribution<std::size_t>(w.begin(), w.end());
  }
  const auto answer_length = [&] {
    return std::clamp<std::size_t>(static_cast<std::size_t>(std::llround(answer(rng))), o.answer_min,
                                   o.answer_max);
  };

  struct conversation {
    std::size_t system = 0;
    std::vector<message> history;
    std::size_t turns = 0;
    double last_s = 0;
  };
  std::vector<conversation> convs;
  std::vector<request> out;
  double t = 0;
  for (std::size_t r = 0; r < o.requests; ++r) {
    t += gap(rng);
    std::vector<std::size_t> open;
    for (std::size_t c = 0; c < convs.size(); ++c)
      if (convs[c].turns < o.max_turns && t - convs[c].last_s >= o.think_s) open.push_back(c);
    const double draw = u(rng);
    std::size_t c;
    std::optional<std::size_t> question;
    if (open.empty() || draw < o.new_conversation) {
      c = convs.size();
      conversation n;
      n.system = pick_system(rng);
      n.history.push_back({"system", system_prompt(n.system)});
      convs.push_back(std::move(n));
      if (o.repeat_share > 0 && u(rng) < o.repeat_share) question = pick_question(rng);
    } else {
      c = open[std::uniform_int_distribution<std::size_t>(0, open.size() - 1)(rng)];
    }
    conversation& cv = convs[c];
    cv.history.push_back({"user", question ? questions[*question] : text[next_text]});
    ++next_text;
    request q;
    q.arrival_s = t;
    q.conversation = c;
    q.turn = cv.turns;
    q.system = cv.system;
    q.messages = cv.history;
    if (question) {
      const auto [it, fresh] = question_answer.try_emplace({cv.system, *question}, 0);
      if (fresh) it->second = answer_length();
      q.answer_tokens = it->second;
      q.repeated = true;
    } else {
      q.answer_tokens = answer_length();
    }
    out.push_back(std::move(q));
    cv.history.push_back({"assistant", text[next_text++]});
    ++cv.turns;
    cv.last_s = t;
  }
  return out;
}

/// @brief The tokens of each prompt that an earlier prompt shares as a prefix, in whole blocks of @p block
/// tokens, summed: what a prefix cache of unbounded size could serve. A prompt's last token never counts
/// (a scheduler computes it whatever is cached: its logits are needed).
template <class Token>
std::size_t shareable_tokens(const std::vector<std::vector<Token>>& prompts, std::size_t block) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto& a = prompts[i];
    std::size_t best = 0;
    for (std::size_t j = 0; j < i; ++j) {
      const auto& b = prompts[j];
      std::size_t l = 0;
      while (l < a.size() && l < b.size() && a[l] == b[l]) ++l;
      best = std::max(best, l);
    }
    if (!a.empty()) total += std::min(best, a.size() - 1) / block * block;
  }
  return total;
}

inline std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += ch;
    } else if (c < 0x20) {
      static const char hex[] = "0123456789abcdef";
      o += "\\u00";
      o += hex[c >> 4];
      o += hex[c & 15];
    } else {
      o += ch;
    }
  }
  return o + "\"";
}

/// @brief One JSON object per request: arrival_s, conversation, turn, system, answer_tokens, messages.
inline void write_jsonl(std::ostream& os, const std::vector<request>& trace) {
  for (const request& q : trace) {
    os << "{\"arrival_s\": " << q.arrival_s << ", \"conversation\": " << q.conversation
       << ", \"turn\": " << q.turn << ", \"system\": " << q.system
       << ", \"answer_tokens\": " << q.answer_tokens << ", \"messages\": [";
    for (std::size_t i = 0; i < q.messages.size(); ++i)
      os << (i ? ", " : "") << "{\"role\": " << json_string(q.messages[i].role)
         << ", \"content\": " << json_string(q.messages[i].content) << "}";
    os << "]}\n";
  }
}

}  // namespace chat_trace
