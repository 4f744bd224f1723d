// libFuzzer target: bytes from the network through the frame decoder and the
// message decoder, as the launcher reads them from an unauthenticated peer
// and from an agent. Nothing may crash, leak or read out of bounds; every
// message that decodes must encode back to the same message.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sgpu/rendezvous/protocol.hpp"

using namespace sgpu::rendezvous;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  // First byte: the limit in force (before or after authentication) and where
  // the stream is split, so frames also arrive in pieces.
  bool authenticated = (data[0] & 1) != 0;
  std::size_t split = data[1];
  std::string_view bytes(reinterpret_cast<const char*>(data + 2), size - 2);
  FrameDecoder decoder(authenticated ? kMaxPayload : kMaxHelloPayload);
  try {
    auto first = bytes.substr(0, split < bytes.size() ? split : bytes.size());
    decoder.feed(first);
    decoder.feed(bytes.substr(first.size()));
    while (auto frame = decoder.next()) {
      try {
        auto message = decode(frame->type, frame->payload);
        auto again = encode(message);
        auto back = decode(static_cast<std::uint8_t>(again[4]), std::string_view(again).substr(kFrameHeaderSize));
        if (!(back == message)) __builtin_trap();
      } catch (const ProtocolError&) {
        // A malformed payload: that connection would be closed.
      }
    }
  } catch (const ProtocolError&) {
    // An oversized frame: that connection would be closed.
  }
  return 0;
}
