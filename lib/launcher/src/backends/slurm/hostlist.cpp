#include "backends/slurm/hostlist.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <iterator>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher::slurm {
namespace {

// One run of numbers inside brackets; `width` is the length of the low
// number as written, so "01-10" prints 01..10 and "1-10" prints 1..10, as
// SLURM does.
struct Range {
  unsigned long long lo = 0;
  unsigned long long hi = 0;
  std::size_t width = 0;
};

// A host expression is literal text and bracket groups in turn:
// "rack[1-2]-n[01-03]" is "rack", {1-2}, "-n", {01-03}.
struct Part {
  std::string literal;  // used when ranges is empty
  std::vector<Range> ranges;
};

std::string format_number(unsigned long long n, std::size_t width) { return fmt::format("{:0{}}", n, width); }

class Parser {
 public:
  Parser(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  std::vector<std::string> expand() {
    if (text_.empty()) fail(0, "it is empty");
    std::vector<std::string> hosts;
    while (true) {
      std::size_t start = pos_;
      auto parts = parse_host_expression();
      if (parts.empty()) fail(start, "a host name is missing");
      append_product(parts, hosts);
      if (pos_ == text_.size()) break;
      ++pos_;  // the comma parse_host_expression stopped at
    }
    return hosts;
  }

 private:
  [[noreturn]] void fail(std::size_t at, std::string_view why) const {
    throw Error(fmt::format(
        "{}: invalid hostlist '{}': {} at column {}; valid forms: n1,n2 or n[01-04,07] or a,b[1-2] or rack[1-2]-n[1-4]",
        what_, text_, why, at + 1));
  }

  // Up to the next top-level comma or the end.
  std::vector<Part> parse_host_expression() {
    std::vector<Part> parts;
    std::string literal;
    while (pos_ < text_.size() && text_[pos_] != ',') {
      char c = text_[pos_];
      if (c == '[') {
        if (!literal.empty()) parts.push_back({std::move(literal), {}});
        literal.clear();
        parts.push_back({"", parse_bracket()});
      } else if (c == ']') {
        fail(pos_, "']' without a matching '['");
      } else if (std::isspace(static_cast<unsigned char>(c)) || std::iscntrl(static_cast<unsigned char>(c))) {
        fail(pos_, "unexpected whitespace (separate hosts with commas)");
      } else {
        literal += c;
        ++pos_;
      }
    }
    if (!literal.empty()) parts.push_back({std::move(literal), {}});
    return parts;
  }

  // At '['; returns at the character after the matching ']'.
  std::vector<Range> parse_bracket() {
    open_bracket_ = pos_++;
    std::vector<Range> ranges;
    while (true) {
      ranges.push_back(parse_range());
      if (pos_ == text_.size()) fail(open_bracket_, "'[' is never closed");
      char c = text_[pos_];
      if (c == ']') {
        ++pos_;
        return ranges;
      }
      if (c != ',') fail(pos_, fmt::format("unexpected '{}' in brackets (expected ',' or ']')", c));
      ++pos_;
    }
  }

  Range parse_range() {
    std::size_t start = pos_;
    std::string_view lo_text = parse_digits();
    Range r{number(lo_text, start), 0, lo_text.size()};
    r.hi = r.lo;
    if (pos_ < text_.size() && text_[pos_] == '-') {
      ++pos_;
      std::size_t hi_at = pos_;
      r.hi = number(parse_digits(), hi_at);
      if (r.hi < r.lo) fail(start, fmt::format("range {}-{} runs backwards", r.lo, r.hi));
    }
    return r;
  }

  std::string_view parse_digits() {
    std::size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (start == pos_) {
      if (pos_ == text_.size()) fail(open_bracket_, "'[' is never closed");
      fail(pos_, fmt::format("expected a number, not '{}'", text_[pos_]));
    }
    return text_.substr(start, pos_ - start);
  }

  unsigned long long number(std::string_view digits, std::size_t at) const {
    unsigned long long n = 0;
    auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec != std::errc() || digits.size() > 18) fail(at, "number too large");
    return n;
  }

  // The cartesian product, first bracket outermost, as SLURM orders it.
  void append_product(const std::vector<Part>& parts, std::vector<std::string>& hosts) const {
    // Counted first, saturating, so "n[0-999999999]" fails before it allocates.
    constexpr unsigned long long cap = kMaxHostlistHosts + 1;
    unsigned long long count = 1;
    for (const auto& p : parts) {
      unsigned long long n = p.ranges.empty() ? 1 : 0;
      for (const auto& r : p.ranges) n = std::min(n + std::min(r.hi - r.lo + 1, cap), cap);
      count = std::min(count * n, cap);
    }
    if (hosts.size() + count > kMaxHostlistHosts)
      throw Error(fmt::format("{}: hostlist '{}' names more than {} hosts", what_, text_, kMaxHostlistHosts));
    std::vector<std::string> names{""};
    for (const auto& p : parts) {
      if (p.ranges.empty()) {
        for (auto& name : names) name += p.literal;
        continue;
      }
      std::vector<std::string> next;
      for (const auto& name : names)
        for (const auto& r : p.ranges)
          for (auto n = r.lo; n <= r.hi; ++n) next.push_back(name + format_number(n, r.width));
      names = std::move(next);
    }
    hosts.insert(hosts.end(), std::make_move_iterator(names.begin()), std::make_move_iterator(names.end()));
  }

  std::string_view text_;
  std::string_view what_;
  std::size_t pos_ = 0;
  std::size_t open_bracket_ = 0;  // of the bracket being parsed
};

// "node007" -> ("node", "007"); "login" -> ("login", "").
std::pair<std::string_view, std::string_view> split_trailing_number(std::string_view host) {
  std::size_t i = host.size();
  while (i > 0 && std::isdigit(static_cast<unsigned char>(host[i - 1]))) --i;
  if (host.size() - i > 18) i = host.size();  // too long to be a number we can range over
  return {host.substr(0, i), host.substr(i)};
}

}  // namespace

std::vector<std::string> expand_hostlist(std::string_view text, std::string_view what) {
  return Parser(text, what).expand();
}

std::string compress_hostlist(const std::vector<std::string>& hosts) {
  std::vector<std::string> groups;
  std::string_view prefix;
  std::vector<Range> ranges;
  auto flush = [&] {
    if (ranges.empty()) return;
    std::string out(prefix);
    if (ranges.size() == 1 && ranges[0].lo == ranges[0].hi) {
      out += format_number(ranges[0].lo, ranges[0].width);
    } else {
      out += '[';
      for (std::size_t i = 0; i < ranges.size(); ++i) {
        const auto& r = ranges[i];
        if (i) out += ',';
        out += format_number(r.lo, r.width);
        if (r.hi != r.lo) out += '-' + format_number(r.hi, r.width);
      }
      out += ']';
    }
    groups.push_back(std::move(out));
    ranges.clear();
  };
  for (const auto& host : hosts) {
    auto [head, digits] = split_trailing_number(host);
    if (digits.empty()) {
      flush();
      groups.push_back(host);
      continue;
    }
    unsigned long long n = 0;
    std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ranges.empty() || head != prefix) {
      flush();
      prefix = head;
    } else if (auto& last = ranges.back(); n == last.hi + 1 && format_number(n, last.width) == digits) {
      last.hi = n;
      continue;
    }
    ranges.push_back({n, n, digits.size()});
  }
  flush();
  std::string out;
  for (std::size_t i = 0; i < groups.size(); ++i) out += (i ? "," : "") + groups[i];
  return out;
}

}  // namespace sgpu::launcher::slurm
