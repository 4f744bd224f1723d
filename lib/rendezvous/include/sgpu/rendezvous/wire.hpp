#pragma once
// Byte-level encoding of protocol messages: big-endian integers and
// length-prefixed strings. The reader checks every length against what is
// left, so a hostile length can neither read past the end nor make it
// allocate more than the frame holds. Pure: no I/O.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sgpu::rendezvous {

// A frame that cannot be decoded. The connection that sent it is closed;
// nothing in it is acted on.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class WireWriter {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u16(std::uint16_t v);
  void u32(std::uint32_t v);
  void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
  void u64(std::uint64_t v);
  void boolean(bool v) { u8(v ? 1 : 0); }
  void bytes(std::string_view v);  // u32 length, then the bytes
  void raw(std::string_view v) { out_.append(v); }

  std::string& str() { return out_; }

 private:
  std::string out_;
};

class WireReader {
 public:
  explicit WireReader(std::string_view in) : in_(in) {}

  std::uint8_t u8();
  std::uint16_t u16();
  std::uint32_t u32();
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  std::uint64_t u64();
  bool boolean();
  // A length-prefixed string of at most `limit` bytes; `what` names the field in errors.
  std::string bytes(std::size_t limit, const char* what);
  std::string_view raw(std::size_t n, const char* what);
  // A list count that cannot exceed `limit`, nor what the rest of the frame
  // could hold at `min_item_size` bytes per item.
  std::uint32_t count(std::size_t limit, std::size_t min_item_size, const char* what);

  std::size_t remaining() const { return in_.size(); }
  void expect_end(const char* what) const;

 private:
  std::string_view take(std::size_t n, const char* what);
  std::string_view in_;
};

}  // namespace sgpu::rendezvous
