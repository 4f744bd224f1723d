#include "sgpu/env/run_name.hpp"

#include <fmt/format.h>

namespace sgpu::env {
namespace {

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The character at `i` as a message shows it: 'x', or its code when unprintable.
std::string shown(std::string_view text, std::size_t i) {
  auto c = static_cast<unsigned char>(text[i]);
  if (c > 0x20 && c < 0x7f) return fmt::format("'{}'", text[i]);
  return fmt::format("byte 0x{:02x}", c);
}

// "" when every character of `text` passes `allowed`, else which one does not.
template <class Allowed>
std::string bad_character(std::string_view text, Allowed allowed) {
  for (std::size_t i = 0; i < text.size(); ++i)
    if (!allowed(text[i])) return fmt::format("character {} ({}) is not allowed", i + 1, shown(text, i));
  return "";
}

constexpr const char* kNameRule =
    "a name starts with a letter, then letters, digits, '.', '_' or '-', at most 64 characters (run ids start with "
    "a digit, so a name is never read as one)";
constexpr const char* kKeyRule = "a key is 1 to 128 letters, digits or any of . _ - : / @ + =";

}  // namespace

std::string run_name_problem(std::string_view name) {
  std::string what;
  if (name.empty())
    what = "the name is empty";
  else if (name.size() > kMaxRunNameLength)
    what = fmt::format("the name is {} characters long", name.size());
  else if (!is_letter(name.front()))
    what = fmt::format("the name starts with {}", shown(name, 0));
  else if (name == "last")
    what = "'last' already means the newest run";
  else
    what = bad_character(name, [](char c) { return is_letter(c) || is_digit(c) || c == '.' || c == '_' || c == '-'; });
  return what.empty() ? what : fmt::format("{}; {}", what, kNameRule);
}

std::string idempotency_key_problem(std::string_view key) {
  std::string what;
  if (key.empty())
    what = "the key is empty";
  else if (key.size() > kMaxIdempotencyKeyLength)
    what = fmt::format("the key is {} characters long", key.size());
  else
    what = bad_character(key, [](char c) {
      return is_letter(c) || is_digit(c) || std::string_view("._-:/@+=").find(c) != std::string_view::npos;
    });
  return what.empty() ? what : fmt::format("{}; {}", what, kKeyRule);
}

bool is_run_name_query(std::string_view query) { return !query.empty() && is_letter(query.front()) && query != "last"; }

}  // namespace sgpu::env
