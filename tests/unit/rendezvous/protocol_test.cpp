#include <doctest/doctest.h>

#include <csignal>

#include "sgpu/rendezvous/protocol.hpp"

using namespace sgpu::rendezvous;
using sgpu::env::ExitStatus;
using sgpu::env::JobEnd;

namespace {

Nonce nonce_of(std::uint8_t seed) {
  Nonce n{};
  for (std::size_t i = 0; i < n.size(); ++i) n[i] = static_cast<std::uint8_t>(seed + i);
  return n;
}

std::vector<Message> one_of_each() {
  sgpu::env::Gpu gpu{3, "NVIDIA H100 80GB HBM3", "H100", 85899345920ULL, "GPU-8e3f", "00000000:18:00.0", false, -1, {}};
  JobEnd cause;
  cause.kind = JobEnd::Kind::Interrupted;
  cause.signal = SIGTERM;
  cause.host = "node-b";
  return {
      ClientHello{kProtocolVersion, nonce_of(1)},
      ServerHello{kProtocolVersion, nonce_of(2), nonce_of(3)},
      Auth{nonce_of(4)},
      Reject{kProtocolVersion, "authentication failed"},
      Welcome{"20261202-115301-3fa2c1", 4, 10000, std::string("{\"job\":1}\0binary", 16)},
      Join{"node-b", "node-b.cluster", {"10.0.0.2", "fd00::2"}, {gpu, gpu}, 8, 1, 4, 4242, {}, {}, ""},
      Join{"node-c",
           "node-c",
           {"10.0.0.3"},
           {},
           1,
           -1,
           0,
           7,
           {{"lo", {"127.0.0.1", "::1"}, true, 65536, "loopback"}, {"ib0", {}, false, 2044, "infiniband"}},
           {{"mlx5_0", "InfiniBand", "ACTIVE"}, {"mlx5_1", "Ethernet", "DOWN"}},
           "127.0.1.1"},
      Join{},
      Assign{1, 4, 8, 32},
      Assign{1, 4, 8, 32, true, 3},
      Ready{29500, ""},
      Ready{0, R"({"gpus":[{"index":0}],"sizes":[]})"},
      Start{"10.0.0.1", 29500},
      Abort{"node-b: Python interpreter 'python9' not found", 127},
      Heartbeat{},
      PreflightId{"fake-nccl-0a1b2c3d"},
      Probe{"10.0.0.1", 29517, true, 5000},
      Probe{"fd00::1", 29517, false, 250},
      ProbeResult{true, "", "eth1", 412},
      ProbeResult{false, "no answer in 5s", "", 5000000},
      RankStarted{9, 777},
      RankOutput{9, OutputStream::Err, std::string("line\n\0\xff partial", 15)},
      RankOutputClosed{9, OutputStream::Out},
      RankFile{9, RankFileKind::Result, "{\"loss\": 0.25}"},
      RankExited{9, ExitStatus::exited(3), false},
      RankExited{10, ExitStatus::killed(SIGKILL), true},
      NodeTeardown{cause, "detail"},
      NodeDone{},
      NodeDone{29517},
      Signal{SIGUSR1, SignalMode::Forward},
      Finish{7, "rank 9 (node-b) failed first: exit 3"},
      Restart{2, "10.0.0.1", 29517},
      NodeSamples{R"({"node":1,"ranks":[{"rank":9,"cpu_percent":99.5}]})"},
      NodeExcluded{1, "2 uncorrectable ECC errors since the driver loaded", 3},
  };
}

std::string payload_of(const std::string& frame) { return frame.substr(kFrameHeaderSize); }

}  // namespace

TEST_CASE("rendezvous::encode and decode round-trip every message") {
  for (const auto& m : one_of_each()) {
    CAPTURE(type_name(type_of(m)));
    auto frame = encode(m);
    REQUIRE(frame.size() >= kFrameHeaderSize);
    CHECK(static_cast<std::uint8_t>(frame[4]) == static_cast<std::uint8_t>(type_of(m)));
    auto length = (static_cast<std::uint8_t>(frame[0]) << 24) | (static_cast<std::uint8_t>(frame[1]) << 16) |
                  (static_cast<std::uint8_t>(frame[2]) << 8) | static_cast<std::uint8_t>(frame[3]);
    CHECK(static_cast<std::size_t>(length) == frame.size() - kFrameHeaderSize);
    CHECK(decode(static_cast<std::uint8_t>(frame[4]), payload_of(frame)) == m);
  }
}

TEST_CASE("rendezvous::decode refuses what it cannot trust") {
  SUBCASE("every truncation of every message") {
    for (const auto& m : one_of_each()) {
      auto payload = payload_of(encode(m));
      for (std::size_t cut = 0; cut < payload.size(); ++cut) {
        CAPTURE(type_name(type_of(m)));
        CAPTURE(cut);
        CHECK_THROWS_AS(decode(type_of(m), std::string_view(payload).substr(0, cut)), ProtocolError);
      }
    }
  }
  SUBCASE("trailing bytes") {
    auto payload = payload_of(encode(Ready{1, ""})) + "x";
    CHECK_THROWS_WITH_AS(decode(MessageType::Ready, payload), doctest::Contains("after the end of Ready"),
                         ProtocolError);
  }
  SUBCASE("unknown types") {
    for (int t : {0, 12, 19, 27, 29, 32, 255}) CHECK_THROWS_AS(decode(static_cast<std::uint8_t>(t), ""), ProtocolError);
  }
  SUBCASE("bad magic") {
    auto payload = payload_of(encode(ClientHello{}));
    payload[0] = 'X';
    CHECK_THROWS_WITH_AS(decode(MessageType::ClientHello, payload), doctest::Contains("bad magic"), ProtocolError);
  }
  SUBCASE("a string longer than its field's limit") {
    Join j;
    j.name = std::string(kMaxNameBytes + 1, 'n');
    CHECK_THROWS_WITH_AS(decode(MessageType::Join, payload_of(encode(j))), doctest::Contains("node name"),
                         ProtocolError);
  }
  SUBCASE("a list count larger than the frame could hold") {
    WireWriter w;
    w.bytes("n");
    w.bytes("h");
    w.u32(60);  // 60 addresses announced, none present
    CHECK_THROWS_WITH_AS(decode(MessageType::Join, w.str()), doctest::Contains("addresses lists 60 items"),
                         ProtocolError);
  }
  SUBCASE("out-of-range enums") {
    auto bad_stream = payload_of(encode(RankOutputClosed{1, OutputStream::Out}));
    bad_stream.back() = 2;
    CHECK_THROWS_AS(decode(MessageType::RankOutputClosed, bad_stream), ProtocolError);
    auto bad_mode = payload_of(encode(Signal{15, SignalMode::Kill}));
    bad_mode.back() = 3;
    CHECK_THROWS_AS(decode(MessageType::Signal, bad_mode), ProtocolError);
    auto bad_bool = payload_of(encode(RankExited{1, ExitStatus::exited(0), false}));
    bad_bool.back() = 7;
    CHECK_THROWS_AS(decode(MessageType::RankExited, bad_bool), ProtocolError);
  }
}

TEST_CASE("rendezvous::decode reads another version's hello far enough to say so") {
  WireWriter w;
  w.raw(kMagic);
  w.u16(kProtocolVersion + 1);
  w.raw("a newer layout with other fields");
  auto m = decode(MessageType::ClientHello, w.str());
  CHECK(std::get<ClientHello>(m).version == kProtocolVersion + 1);
  auto s = decode(MessageType::ServerHello, w.str());
  CHECK(std::get<ServerHello>(s).version == kProtocolVersion + 1);
}

TEST_CASE("rendezvous::FrameDecoder") {
  SUBCASE("frames split at every byte boundary come out whole") {
    std::string stream;
    auto messages = one_of_each();
    for (const auto& m : messages) stream += encode(m);
    for (std::size_t step : {1U, 2U, 7U, 64U, 100000U}) {
      CAPTURE(step);
      FrameDecoder d(kMaxPayload);
      std::vector<Message> out;
      for (std::size_t at = 0; at < stream.size(); at += step) {
        d.feed(std::string_view(stream).substr(at, step));
        while (auto f = d.next()) out.push_back(decode(f->type, f->payload));
      }
      CHECK(out == messages);
      CHECK(d.buffered() == 0);
    }
  }
  SUBCASE("an oversized frame is refused from its header alone") {
    FrameDecoder d(kMaxHelloPayload);
    WireWriter w;
    w.u32(kMaxHelloPayload + 1);
    w.u8(static_cast<std::uint8_t>(MessageType::ClientHello));
    d.feed(w.str());
    CHECK_THROWS_WITH_AS(d.next(), doctest::Contains("exceeds the limit of 1024"), ProtocolError);
  }
  SUBCASE("the limit can be raised after authentication") {
    FrameDecoder d(kMaxHelloPayload);
    auto big = encode(RankOutput{0, OutputStream::Out, std::string(4000, 'x')});
    d.feed(big);
    CHECK_THROWS_AS(d.next(), ProtocolError);
    FrameDecoder after(kMaxHelloPayload);
    after.set_max_payload(kMaxPayload);
    after.feed(big);
    CHECK(after.next().has_value());
  }
  SUBCASE("a partial header waits for more") {
    FrameDecoder d(kMaxPayload);
    d.feed(std::string("\0\0", 2));
    CHECK_FALSE(d.next().has_value());
  }
}

TEST_CASE("rendezvous::WireReader") {
  WireWriter w;
  w.u8(0xab);
  w.u16(0xbeef);
  w.u32(0xdeadbeef);
  w.i32(-5);
  w.u64(0x0102030405060708ULL);
  w.boolean(true);
  w.bytes("hello");
  WireReader r(w.str());
  CHECK(r.u8() == 0xab);
  CHECK(r.u16() == 0xbeef);
  CHECK(r.u32() == 0xdeadbeef);
  CHECK(r.i32() == -5);
  CHECK(r.u64() == 0x0102030405060708ULL);
  CHECK(r.boolean());
  CHECK(r.bytes(5, "greeting") == "hello");
  CHECK(r.remaining() == 0);
  CHECK_THROWS_AS(r.u8(), ProtocolError);
  auto tail = w.str().substr(w.str().size() - 9);  // the string's length and bytes
  WireReader limited(tail);
  CHECK_THROWS_WITH_AS(limited.bytes(4, "greeting"), doctest::Contains("greeting of 5 bytes exceeds the limit of 4"),
                       ProtocolError);
}
