#pragma once

// The pieces of frugal_server's chat and completion endpoints that need no model: the request's fields
// (OpenAI's names and types), the decoded text with stop strings, a watch on the client's connection, and
// the response and Server-Sent Event shapes.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <frugal/model/bpe.hpp>
#include <frugal/model/chat_template.hpp>
#include <nlohmann/json.hpp>

namespace server {

/// @brief A request refused with a status, a message and the field it names (OpenAI's error shape).
struct request_error {
  int status = 400;
  std::string message;
  std::string param;
};

/// @brief The fields of POST /v1/chat/completions and /v1/completions, checked.
struct completion_request {
  std::string model;
  std::vector<frugal::chat::message> messages;  ///< chat
  std::string prompt;                           ///< completions
  std::optional<std::size_t> max_tokens;
  const char* max_tokens_field = "max_tokens";
  float temperature = 1;
  float top_p = 1;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  std::string user;
};

namespace detail {

inline std::optional<request_error> bad(const std::string& message, const std::string& param) {
  return request_error{400, message, param};
}

inline std::optional<request_error> read_content(const nlohmann::json& c, const std::string& at,
                                                 std::string& out) {
  if (c.is_null()) return std::nullopt;
  if (c.is_string()) {
    out = c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return bad("'" + at + "' must be a string or an array of text parts", at);
  for (std::size_t i = 0; i < c.size(); ++i) {
    const auto& p = c[i];
    const std::string pat = at + "[" + std::to_string(i) + "]";
    if (!p.is_object() || p.value("type", "") != "text" || !p.contains("text") || !p["text"].is_string())
      return bad("'" + pat + "' must be {\"type\": \"text\", \"text\": \"...\"} (only text is supported)",
                 at);
    out += p["text"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace detail

/// @brief Reads @p body as a chat (@p chat) or completions request; the first bad field is returned.
inline std::optional<request_error> parse_completion_request(const nlohmann::json& body, bool chat,
                                                             completion_request& r) {
  using detail::bad;
  if (!body.is_object()) return bad("the body must be a JSON object", "");
  static const std::vector<std::string> known = {"model",
                                                 "messages",
                                                 "prompt",
                                                 "max_tokens",
                                                 "max_completion_tokens",
                                                 "temperature",
                                                 "top_p",
                                                 "seed",
                                                 "stop",
                                                 "stream",
                                                 "stream_options",
                                                 "user",
                                                 "n",
                                                 "presence_penalty",
                                                 "frequency_penalty",
                                                 "logprobs"};
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end() ||
        it.key() == (chat ? "prompt" : "messages"))
      return bad("unrecognized request argument supplied: " + it.key(), it.key());
  }
  const auto present = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (!present("model") || !body["model"].is_string()) return bad("'model' must be a string", "model");
  r.model = body["model"].get<std::string>();
  if (chat) {
    if (!present("messages")) return bad("'messages' is required", "messages");
    const auto& ms = body["messages"];
    if (!ms.is_array()) return bad("'messages' must be an array", "messages");
    if (ms.empty()) return bad("'messages' must not be empty", "messages");
    for (std::size_t i = 0; i < ms.size(); ++i) {
      const std::string at = "messages[" + std::to_string(i) + "]";
      if (!ms[i].is_object()) return bad("'" + at + "' must be an object", "messages");
      if (!ms[i].contains("role") || !ms[i]["role"].is_string())
        return bad("'" + at + ".role' must be a string", "messages");
      frugal::chat::message m{ms[i]["role"].get<std::string>(), {}};
      if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
        return bad("'" + at + ".role' is '" + m.role + "'; expected system, user, assistant or tool",
                   "messages");
      if (auto e =
              detail::read_content(ms[i].value("content", nlohmann::json()), at + ".content", m.content)) {
        e->param = "messages";
        return e;
      }
      r.messages.push_back(std::move(m));
    }
  } else {
    if (!present("prompt")) return bad("'prompt' is required", "prompt");
    const auto& p = body["prompt"];
    if (p.is_string())
      r.prompt = p.get<std::string>();
    else if (p.is_array() && p.size() == 1 && p[0].is_string())
      r.prompt = p[0].get<std::string>();
    else
      return bad("'prompt' must be a string (or an array of one string)", "prompt");
    if (r.prompt.empty()) return bad("'prompt' must not be empty", "prompt");
  }
  for (const char* k : {"max_tokens", "max_completion_tokens"}) {
    if (!present(k)) continue;
    const auto& v = body[k];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1)
      return bad(std::string("'") + k + "' must be a positive integer", k);
    r.max_tokens = static_cast<std::size_t>(v.get<std::int64_t>());
    r.max_tokens_field = k;
  }
  if (present("temperature")) {
    const auto& v = body["temperature"];
    if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 2)
      return bad("'temperature' must be a number in [0, 2]", "temperature");
    r.temperature = v.get<float>();
  }
  if (present("top_p")) {
    const auto& v = body["top_p"];
    if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 1)
      return bad("'top_p' must be a number in (0, 1]", "top_p");
    r.top_p = v.get<float>();
  }
  if (present("seed")) {
    if (!body["seed"].is_number_integer()) return bad("'seed' must be an integer", "seed");
    r.seed = body["seed"].is_number_unsigned() ? body["seed"].get<std::uint64_t>()
                                               : static_cast<std::uint64_t>(body["seed"].get<std::int64_t>());
  }
  if (present("stop")) {
    const auto& v = body["stop"];
    if (v.is_string()) {
      r.stop.push_back(v.get<std::string>());
    } else if (v.is_array() && v.size() <= 4) {
      for (const auto& s : v) {
        if (!s.is_string()) return bad("'stop' must be a string or an array of up to 4 strings", "stop");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      return bad("'stop' must be a string or an array of up to 4 strings", "stop");
    }
    for (const auto& s : r.stop)
      if (s.empty()) return bad("'stop' strings must not be empty", "stop");
  }
  if (present("stream")) {
    if (!body["stream"].is_boolean()) return bad("'stream' must be true or false", "stream");
    r.stream = body["stream"].get<bool>();
  }
  if (present("stream_options")) {
    const auto& v = body["stream_options"];
    if (!r.stream) return bad("'stream_options' is only allowed with \"stream\": true", "stream_options");
    if (!v.is_object()) return bad("'stream_options' must be an object", "stream_options");
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key() != "include_usage" || !it->is_boolean())
        return bad("'stream_options' takes only include_usage (true or false)", "stream_options");
      r.include_usage = it->get<bool>();
    }
  }
  if (present("user")) {
    if (!body["user"].is_string()) return bad("'user' must be a string", "user");
    r.user = body["user"].get<std::string>();
  }
  if (present("n") && (!body["n"].is_number_integer() || body["n"].get<std::int64_t>() != 1))
    return bad("'n' must be 1 (one choice per request)", "n");
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (present(k) && (!body[k].is_number() || body[k].get<double>() != 0))
      return bad(std::string("'") + k + "' must be 0 (penalties are not supported)", k);
  if (present("logprobs") && (!body["logprobs"].is_boolean() || body["logprobs"].get<bool>()))
    return bad("'logprobs' must be false (log probabilities are not returned)", "logprobs");
  return std::nullopt;
}

/// @brief A generation's text as it is decoded, cut at the first stop string. Stop strings are matched on
/// the decoded text, so one that spans tokens is found: text that could still be the start of a stop
/// string is held back until the next tokens settle it, and never emitted if the stop string completes.
/// What push() returns never splits a UTF-8 character (frugal::bpe::stream_decoder holds incomplete ones).
class text_stream {
 public:
  text_stream(const frugal::bpe::tokenizer& t, std::vector<std::string> stops)
      : decoder_(t), stops_(std::move(stops)) {}

  /// @brief The text that the token @p id lets out now (possibly empty); nothing once stopped().
  std::string push(std::int32_t id) {
    if (stopped_) return {};
    held_ += decoder_.push(id);
    return take(false);
  }
  /// @brief At the end of the generation: what is still held (an incomplete character as U+FFFD).
  std::string finish() {
    if (stopped_) return {};
    held_ += decoder_.finish();
    return take(true);
  }
  /// @brief True once a stop string has appeared; the text before it has been returned.
  bool stopped() const noexcept { return stopped_; }

 private:
  std::string take(bool final) {
    std::size_t cut = std::string::npos;
    for (const auto& s : stops_) cut = std::min(cut, held_.find(s));
    std::string out;
    if (cut != std::string::npos) {
      stopped_ = true;
      out = held_.substr(0, cut);
      held_.clear();
      return out;
    }
    std::size_t hold = 0;  // the longest end of held_ that begins a stop string
    if (!final)
      for (const auto& s : stops_)
        for (std::size_t k = std::min(s.size() - 1, held_.size()); k > hold; --k)
          if (std::string_view(held_).substr(held_.size() - k) == std::string_view(s).substr(0, k)) {
            hold = k;
            break;
          }
    out = held_.substr(0, held_.size() - hold);
    held_.erase(0, held_.size() - hold);
    return out;
  }

  frugal::bpe::stream_decoder decoder_;
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

/// @brief Whether the client of a request has gone. cpp-httplib 0.11 gives a handler no way to know
/// while it waits (it learns only when a write fails), so the connection's socket is found among the
/// process's descriptors by its two addresses, and polled: a peer that closed or half-closed its end has
/// gone. Where it is not found, closed() is always false and a failed write is the only sign.
class connection_watch {
 public:
  connection_watch(const std::string& remote_addr, int remote_port, int local_port) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      const std::string name = e.path().filename().string();
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      const int fd = std::stoi(name);
      sockaddr_storage peer{}, self{};
      socklen_t pl = sizeof peer, sl = sizeof self;
      if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0 ||
          ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &sl) != 0)
        continue;
      if (port_of(self) == local_port && port_of(peer) == remote_port && addr_of(peer) == remote_addr) {
        fd_ = fd;
        break;
      }
    }
  }
  bool found() const noexcept { return fd_ >= 0; }
  bool closed() const {
    if (fd_ < 0) return false;
    pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }

 private:
  static int port_of(const sockaddr_storage& a) {
    if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
    if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
    return -1;
  }
  static std::string addr_of(const sockaddr_storage& a) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (a.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
    else if (a.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
    return buf;
  }
  int fd_ = -1;
};

/// @brief One Server-Sent Event carrying @p j.
inline std::string sse_event(const nlohmann::json& j) { return "data: " + j.dump() + "\n\n"; }

}  // namespace server
