#pragma once

// Chat templates read from a model file's tokenizer.chat_template. The file stores a Jinja program; this is
// not a Jinja engine: it recognises the templates it knows by their shape and renders them natively, and
// refuses every other one with a clear error (a caller may name a known template to override it).
// Known: "chatml" (<|im_start|>role\ncontent<|im_end|>\n), with the default system prompt that some files
// insert when the conversation has none.
//
// render() returns segments: the template's own text (which may spell control tokens) apart from the
// messages' content (which must never be read as control tokens), so a user cannot end a turn early by
// typing "<|im_end|>".

#include <algorithm>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/model/gguf.hpp"
#include "frugal/namespace.hpp"

FRUGAL_BEGIN_NAMESPACE
namespace chat {

/// @brief Thrown for an unknown template and for a conversation the template cannot render.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// @brief One turn of a conversation.
struct message {
  std::string role;
  std::string content;
};

/// @brief A piece of a rendered conversation: template text (control tokens allowed) or message content.
struct segment {
  std::string text;
  bool is_content = false;
};

/// @brief The names of the templates render() knows.
inline constexpr std::string_view known_templates[] = {"chatml"};

class chat_template {
 public:
  /// @brief The file's template (tokenizer.chat_template), or the known template @p override_name when it is
  /// not empty. A file without a template, or with one this code does not recognise, is an error that names
  /// the file and says how to override it.
  static chat_template from_gguf(const gguf::file& f, std::string_view override_name = {}) {
    if (!override_name.empty()) return named(override_name);
    if (!f.contains("tokenizer.chat_template"))
      throw error("frugal::chat: " + f.path() +
                  ": the file has no tokenizer.chat_template; name a known template (chatml) to use one");
    try {
      return recognise(f.get_string("tokenizer.chat_template"), f.path());
    } catch (const gguf::error& e) {
      throw error(std::string("frugal::chat: ") + e.what());
    }
  }

  /// @brief A known template by name.
  static chat_template named(std::string_view name) {
    if (name != "chatml")
      throw error("frugal::chat: unknown template name '" + std::string(name) + "' (known: chatml)");
    return chat_template{};
  }

  /// @brief Recognises @p source (Jinja text); @p label names it in errors.
  static chat_template recognise(std::string_view source, std::string_view label) {
    chat_template t;
    const bool chatml = source.find("<|im_start|>") != std::string_view::npos &&
                        source.find("<|im_end|>") != std::string_view::npos &&
                        source.find("message['role']") != std::string_view::npos &&
                        source.find("message['content']") != std::string_view::npos;
    if (!chatml)
      throw error(
          "frugal::chat: " + std::string(label) +
          ": the chat template is not one this code recognises (known: chatml); name one to override it");
    // "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n...<|im_end|>\n' }}"
    constexpr std::string_view guard = "messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n";
    if (const auto g = source.find(guard); g != std::string_view::npos) {
      const auto begin = g + guard.size();
      const auto end = source.find("<|im_end|>", begin);
      if (end == std::string_view::npos)
        throw error("frugal::chat: " + std::string(label) +
                    ": the default system prompt is not closed by <|im_end|>");
      t.default_system_ = std::string(source.substr(begin, end - begin));
    }
    return t;
  }

  std::string_view name() const noexcept { return "chatml"; }
  /// @brief The system prompt added when a conversation has none (empty: none is added).
  const std::string& default_system() const noexcept { return default_system_; }
  /// @brief The text that ends an assistant turn.
  std::string_view end_of_turn() const noexcept { return "<|im_end|>"; }

  /// @brief The conversation as segments; with @p add_generation_prompt, ends with the assistant's opening.
  std::vector<segment> render(std::span<const message> messages, bool add_generation_prompt = true) const {
    if (messages.empty()) throw error("frugal::chat: a conversation needs at least one message");
    std::vector<segment> out;
    const auto tmpl = [&](std::string s) {
      if (!out.empty() && !out.back().is_content)
        out.back().text += s;
      else
        out.push_back({std::move(s), false});
    };
    for (std::size_t i = 0; i < messages.size(); ++i) {
      const message& m = messages[i];
      if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool")
        throw error("frugal::chat: messages[" + std::to_string(i) + "].role is '" + m.role +
                    "'; expected system, user, assistant or tool");
      if (i == 0 && m.role != "system" && !default_system_.empty())
        tmpl("<|im_start|>system\n" + default_system_ + "<|im_end|>\n");
      tmpl("<|im_start|>" + m.role + "\n");
      if (!m.content.empty()) out.push_back({m.content, true});
      tmpl("<|im_end|>\n");
    }
    if (add_generation_prompt) tmpl("<|im_start|>assistant\n");
    return out;
  }

  /// @brief The segments joined into one string (as a Jinja engine would render it).
  static std::string join(std::span<const segment> s) {
    std::string out;
    for (const segment& x : s) out += x.text;
    return out;
  }

 private:
  chat_template() = default;
  std::string default_system_;
};

}  // namespace chat
FRUGAL_END_NAMESPACE
