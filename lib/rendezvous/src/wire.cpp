#include "sgpu/rendezvous/wire.hpp"

#include <fmt/format.h>

namespace sgpu::rendezvous {

void WireWriter::u16(std::uint16_t v) {
  u8(static_cast<std::uint8_t>(v >> 8));
  u8(static_cast<std::uint8_t>(v));
}

void WireWriter::u32(std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) u8(static_cast<std::uint8_t>(v >> shift));
}

void WireWriter::u64(std::uint64_t v) {
  u32(static_cast<std::uint32_t>(v >> 32));
  u32(static_cast<std::uint32_t>(v));
}

void WireWriter::bytes(std::string_view v) {
  u32(static_cast<std::uint32_t>(v.size()));
  out_.append(v);
}

std::string_view WireReader::take(std::size_t n, const char* what) {
  if (n > in_.size()) throw ProtocolError(fmt::format("truncated {}: {} bytes needed, {} left", what, n, in_.size()));
  auto head = in_.substr(0, n);
  in_.remove_prefix(n);
  return head;
}

std::uint8_t WireReader::u8() { return static_cast<std::uint8_t>(take(1, "integer")[0]); }

std::uint16_t WireReader::u16() {
  auto b = take(2, "integer");
  return static_cast<std::uint16_t>((static_cast<std::uint8_t>(b[0]) << 8) | static_cast<std::uint8_t>(b[1]));
}

std::uint32_t WireReader::u32() {
  auto b = take(4, "integer");
  std::uint32_t v = 0;
  for (char c : b) v = (v << 8) | static_cast<std::uint8_t>(c);
  return v;
}

std::uint64_t WireReader::u64() {
  std::uint64_t hi = u32();
  return (hi << 32) | u32();
}

bool WireReader::boolean() {
  auto v = u8();
  if (v > 1) throw ProtocolError(fmt::format("invalid boolean {}", v));
  return v == 1;
}

std::string WireReader::bytes(std::size_t limit, const char* what) {
  auto n = u32();
  if (n > limit) throw ProtocolError(fmt::format("{} of {} bytes exceeds the limit of {}", what, n, limit));
  return std::string(take(n, what));
}

std::string_view WireReader::raw(std::size_t n, const char* what) { return take(n, what); }

std::uint32_t WireReader::count(std::size_t limit, std::size_t min_item_size, const char* what) {
  auto n = u32();
  if (n > limit) throw ProtocolError(fmt::format("{} lists {} items, more than the limit of {}", what, n, limit));
  if (min_item_size > 0 && n > in_.size() / min_item_size)
    throw ProtocolError(fmt::format("{} lists {} items but the frame holds only {} bytes", what, n, in_.size()));
  return n;
}

void WireReader::expect_end(const char* what) const {
  if (!in_.empty()) throw ProtocolError(fmt::format("{} bytes after the end of {}", in_.size(), what));
}

}  // namespace sgpu::rendezvous
