#include "sgpu/rendezvous/protocol.hpp"

#include <cstring>
#include <iterator>

#include <fmt/format.h>

namespace sgpu::rendezvous {
namespace {

// The type of each alternative of Message, in the variant's order.
constexpr MessageType kTypeOfIndex[] = {
    MessageType::ClientHello,  MessageType::ServerHello, MessageType::Auth,
    MessageType::Reject,       MessageType::Welcome,     MessageType::Join,
    MessageType::Assign,       MessageType::Ready,       MessageType::Start,
    MessageType::Abort,        MessageType::Heartbeat,   MessageType::PreflightId,
    MessageType::RankStarted,  MessageType::RankOutput,  MessageType::RankOutputClosed,
    MessageType::RankFile,     MessageType::RankExited,  MessageType::NodeTeardown,
    MessageType::NodeDone,     MessageType::Signal,      MessageType::Finish,
    MessageType::Restart,      MessageType::Inspection,  MessageType::Inspect,
    MessageType::Probe,        MessageType::ProbeResult, MessageType::NodeSamples,
    MessageType::NodeExcluded,
};
static_assert(std::size(kTypeOfIndex) == std::variant_size_v<Message>);

template <std::size_t N>
void put_array(WireWriter& w, const std::array<std::uint8_t, N>& a) {
  w.raw(std::string_view(reinterpret_cast<const char*>(a.data()), N));
}

template <std::size_t N>
std::array<std::uint8_t, N> get_array(WireReader& r, const char* what) {
  std::array<std::uint8_t, N> a{};
  auto bytes = r.raw(N, what);
  std::memcpy(a.data(), bytes.data(), N);
  return a;
}

void put_status(WireWriter& w, const env::ExitStatus& s) {
  w.u8(static_cast<std::uint8_t>((s.code ? 1 : 0) | (s.signal ? 2 : 0)));
  w.i32(s.code.value_or(0));
  w.i32(s.signal.value_or(0));
}

env::ExitStatus get_status(WireReader& r) {
  auto flags = r.u8();
  if (flags > 3) throw ProtocolError(fmt::format("invalid exit status flags {}", flags));
  env::ExitStatus s;
  auto code = r.i32();
  auto sig = r.i32();
  if (flags & 1) s.code = code;
  if (flags & 2) s.signal = sig;
  return s;
}

void put_gpu(WireWriter& w, const env::Gpu& g) {
  w.i32(g.index);
  w.bytes(g.name);
  w.bytes(g.type);
  w.u64(g.memory_bytes);
  w.bytes(g.uuid);
  w.bytes(g.pci_bus_id);
  w.boolean(g.visible);
}

env::Gpu get_gpu(WireReader& r) {
  env::Gpu g;
  g.index = r.i32();
  g.name = r.bytes(kMaxNameBytes, "GPU name");
  g.type = r.bytes(kMaxNameBytes, "GPU type");
  g.memory_bytes = r.u64();
  g.uuid = r.bytes(kMaxNameBytes, "GPU uuid");
  g.pci_bus_id = r.bytes(kMaxNameBytes, "GPU PCI bus id");
  g.visible = r.boolean();
  return g;
}

OutputStream get_stream(WireReader& r) {
  auto v = r.u8();
  if (v > 1) throw ProtocolError(fmt::format("invalid output stream {}", v));
  return static_cast<OutputStream>(v);
}

// Hellos keep magic + version first in every version of the protocol.
void put_hello_head(WireWriter& w, std::uint16_t version) {
  w.raw(kMagic);
  w.u16(version);
}

std::uint16_t get_hello_head(WireReader& r) {
  if (r.raw(kMagic.size(), "magic") != kMagic) throw ProtocolError("not an sgpu rendezvous peer (bad magic)");
  return r.u16();
}

void put(WireWriter& w, const ClientHello& m) {
  put_hello_head(w, m.version);
  put_array(w, m.nonce);
}
void put(WireWriter& w, const ServerHello& m) {
  put_hello_head(w, m.version);
  put_array(w, m.nonce);
  put_array(w, m.proof);
}
void put(WireWriter& w, const Auth& m) { put_array(w, m.proof); }
void put(WireWriter& w, const Reject& m) {
  w.u16(m.version);
  w.bytes(m.reason);
}
void put(WireWriter& w, const Welcome& m) {
  w.bytes(m.run_id);
  w.u32(m.nnodes);
  w.u32(m.heartbeat_timeout_ms);
  w.bytes(m.job);
}
void put(WireWriter& w, const Join& m) {
  w.bytes(m.name);
  w.bytes(m.hostname);
  w.u32(static_cast<std::uint32_t>(m.addresses.size()));
  for (const auto& a : m.addresses) w.bytes(a);
  w.u32(static_cast<std::uint32_t>(m.gpus.size()));
  for (const auto& g : m.gpus) put_gpu(w, g);
  w.u32(m.local_ranks);
  w.i32(m.node_rank);
  w.u32(m.nnodes);
  w.i32(m.pid);
  w.u32(static_cast<std::uint32_t>(m.interfaces.size()));
  for (const auto& i : m.interfaces) {
    w.bytes(i.name);
    w.u32(static_cast<std::uint32_t>(i.addresses.size()));
    for (const auto& a : i.addresses) w.bytes(a);
    w.u8(i.up ? 1 : 0);
    w.u32(i.mtu);
    w.bytes(i.kind);
  }
  w.u32(static_cast<std::uint32_t>(m.rdma.size()));
  for (const auto& d : m.rdma) {
    w.bytes(d.name);
    w.bytes(d.link_layer);
    w.bytes(d.state);
  }
  w.bytes(m.hostname_address);
}
void put(WireWriter& w, const Assign& m) {
  w.u32(m.node_rank);
  w.u32(m.nnodes);
  w.u32(m.rank_base);
  w.u32(m.world_size);
  w.u8(m.spare ? 1 : 0);
  w.u32(m.attempt);
}
void put(WireWriter& w, const Ready& m) {
  w.u32(m.master_port);
  w.bytes(m.preflight);
}
void put(WireWriter& w, const Start& m) {
  w.bytes(m.master_addr);
  w.u32(m.master_port);
}
void put(WireWriter& w, const Abort& m) {
  w.bytes(m.message);
  w.i32(m.exit_code);
}
void put(WireWriter&, const Heartbeat&) {}
void put(WireWriter& w, const PreflightId& m) { w.bytes(m.id); }
void put(WireWriter& w, const Probe& m) {
  w.bytes(m.master_addr);
  w.u32(m.master_port);
  w.u8(m.listen ? 1 : 0);
  w.u32(m.timeout_ms);
}
void put(WireWriter& w, const ProbeResult& m) {
  w.u8(m.ok ? 1 : 0);
  w.bytes(m.error);
  w.bytes(m.interface);
  w.u32(m.elapsed_us);
}
void put(WireWriter& w, const RankStarted& m) {
  w.u32(m.rank);
  w.i32(m.pid);
}
void put(WireWriter& w, const RankOutput& m) {
  w.u32(m.rank);
  w.u8(static_cast<std::uint8_t>(m.stream));
  w.bytes(m.bytes);
}
void put(WireWriter& w, const RankOutputClosed& m) {
  w.u32(m.rank);
  w.u8(static_cast<std::uint8_t>(m.stream));
}
void put(WireWriter& w, const RankFile& m) {
  w.u32(m.rank);
  w.u8(static_cast<std::uint8_t>(m.kind));
  w.bytes(m.content);
}
void put(WireWriter& w, const RankExited& m) {
  w.u32(m.rank);
  put_status(w, m.status);
  w.boolean(m.terminated_by_sgpu);
}
void put(WireWriter& w, const NodeTeardown& m) {
  w.u8(static_cast<std::uint8_t>(m.cause.kind));
  w.i32(m.cause.rank);
  put_status(w, m.cause.status);
  w.i32(m.cause.signal);
  w.i32(m.cause.spawn_errno);
  w.bytes(m.cause.host);
  w.bytes(m.cause.reason);
  w.bytes(m.detail);
}
void put(WireWriter& w, const NodeDone& m) { w.u32(m.next_master_port); }
void put(WireWriter& w, const Signal& m) {
  w.i32(m.signal);
  w.u8(static_cast<std::uint8_t>(m.mode));
}
void put(WireWriter& w, const Finish& m) {
  w.i32(m.exit_code);
  w.bytes(m.summary);
}
void put(WireWriter& w, const Inspect& m) {
  w.u32(m.id);
  w.u8(static_cast<std::uint8_t>(m.what));
  w.u8(m.native ? 1 : 0);
}
void put(WireWriter& w, const Inspection& m) {
  w.u32(m.id);
  w.u64(m.progress_age_ms);
  w.bytes(m.stacks);
}
void put(WireWriter& w, const NodeSamples& m) { w.bytes(m.json); }
void put(WireWriter& w, const NodeExcluded& m) {
  w.u32(m.gpu);
  w.bytes(m.reason);
  w.u32(m.attempt);
}
void put(WireWriter& w, const Restart& m) {
  w.u32(m.attempt);
  w.bytes(m.master_addr);
  w.u32(m.master_port);
}

Message get(MessageType type, WireReader& r) {
  switch (type) {
    case MessageType::ClientHello: {
      ClientHello m;
      m.version = get_hello_head(r);
      // A newer peer may add fields after the version: stop here and let
      // the version check speak rather than failing on the layout.
      if (m.version != kProtocolVersion) return m;
      m.nonce = get_array<kNonceSize>(r, "nonce");
      return m;
    }
    case MessageType::ServerHello: {
      ServerHello m;
      m.version = get_hello_head(r);
      if (m.version != kProtocolVersion) return m;
      m.nonce = get_array<kNonceSize>(r, "nonce");
      m.proof = get_array<kProofSize>(r, "proof");
      return m;
    }
    case MessageType::Auth:
      return Auth{get_array<kProofSize>(r, "proof")};
    case MessageType::Reject: {
      Reject m;
      m.version = r.u16();
      m.reason = r.bytes(kMaxMessageBytes, "reason");
      return m;
    }
    case MessageType::Welcome: {
      Welcome m;
      m.run_id = r.bytes(kMaxNameBytes, "run id");
      m.nnodes = r.u32();
      m.heartbeat_timeout_ms = r.u32();
      m.job = r.bytes(kMaxJobBytes, "job");
      return m;
    }
    case MessageType::Join: {
      Join m;
      m.name = r.bytes(kMaxNameBytes, "node name");
      m.hostname = r.bytes(kMaxNameBytes, "hostname");
      auto n = r.count(kMaxAddresses, 4, "addresses");
      for (std::uint32_t i = 0; i < n; ++i) m.addresses.push_back(r.bytes(kMaxNameBytes, "address"));
      n = r.count(kMaxGpus, 37, "GPUs");
      for (std::uint32_t i = 0; i < n; ++i) m.gpus.push_back(get_gpu(r));
      m.local_ranks = r.u32();
      m.node_rank = r.i32();
      m.nnodes = r.u32();
      m.pid = r.i32();
      n = r.count(kMaxInterfaces, 17, "interfaces");
      for (std::uint32_t i = 0; i < n; ++i) {
        NetInterface f;
        f.name = r.bytes(kMaxNameBytes, "interface name");
        auto addresses = r.count(kMaxAddresses, 4, "interface addresses");
        for (std::uint32_t k = 0; k < addresses; ++k) f.addresses.push_back(r.bytes(kMaxNameBytes, "address"));
        f.up = r.u8() != 0;
        f.mtu = r.u32();
        f.kind = r.bytes(kMaxNameBytes, "interface kind");
        m.interfaces.push_back(std::move(f));
      }
      n = r.count(kMaxInterfaces, 12, "RDMA devices");
      for (std::uint32_t i = 0; i < n; ++i) {
        RdmaDevice d;
        d.name = r.bytes(kMaxNameBytes, "RDMA device");
        d.link_layer = r.bytes(kMaxNameBytes, "link layer");
        d.state = r.bytes(kMaxNameBytes, "port state");
        m.rdma.push_back(std::move(d));
      }
      m.hostname_address = r.bytes(kMaxNameBytes, "hostname address");
      return m;
    }
    case MessageType::Assign: {
      Assign m;
      m.node_rank = r.u32();
      m.nnodes = r.u32();
      m.rank_base = r.u32();
      m.world_size = r.u32();
      m.spare = r.u8() != 0;
      m.attempt = r.u32();
      return m;
    }
    case MessageType::Ready: {
      Ready m;
      m.master_port = r.u32();
      m.preflight = r.bytes(kMaxPreflightBytes, "preflight report");
      return m;
    }
    case MessageType::PreflightId:
      return PreflightId{r.bytes(kMaxPreflightIdBytes, "preflight id")};
    case MessageType::Probe: {
      Probe m;
      m.master_addr = r.bytes(kMaxNameBytes, "master address");
      m.master_port = r.u32();
      m.listen = r.u8() != 0;
      m.timeout_ms = r.u32();
      return m;
    }
    case MessageType::ProbeResult: {
      ProbeResult m;
      m.ok = r.u8() != 0;
      m.error = r.bytes(kMaxMessageBytes, "probe error");
      m.interface = r.bytes(kMaxNameBytes, "interface");
      m.elapsed_us = r.u32();
      return m;
    }
    case MessageType::Start: {
      Start m;
      m.master_addr = r.bytes(kMaxNameBytes, "master address");
      m.master_port = r.u32();
      return m;
    }
    case MessageType::Abort: {
      Abort m;
      m.message = r.bytes(kMaxMessageBytes, "message");
      m.exit_code = r.i32();
      return m;
    }
    case MessageType::Heartbeat:
      return Heartbeat{};
    case MessageType::RankStarted: {
      RankStarted m;
      m.rank = r.u32();
      m.pid = r.i32();
      return m;
    }
    case MessageType::RankOutput: {
      RankOutput m;
      m.rank = r.u32();
      m.stream = get_stream(r);
      m.bytes = r.bytes(kMaxPayload, "output");
      return m;
    }
    case MessageType::RankOutputClosed: {
      RankOutputClosed m;
      m.rank = r.u32();
      m.stream = get_stream(r);
      return m;
    }
    case MessageType::RankFile: {
      RankFile m;
      m.rank = r.u32();
      auto kind = r.u8();
      if (kind > 1) throw ProtocolError(fmt::format("invalid rank file kind {}", kind));
      m.kind = static_cast<RankFileKind>(kind);
      m.content = r.bytes(kMaxFileBytes, "rank file");
      return m;
    }
    case MessageType::RankExited: {
      RankExited m;
      m.rank = r.u32();
      m.status = get_status(r);
      m.terminated_by_sgpu = r.boolean();
      return m;
    }
    case MessageType::NodeTeardown: {
      NodeTeardown m;
      auto kind = r.u8();
      if (kind > static_cast<std::uint8_t>(env::JobEnd::Kind::Preempted))
        throw ProtocolError(fmt::format("invalid teardown cause {}", kind));
      m.cause.kind = static_cast<env::JobEnd::Kind>(kind);
      m.cause.rank = r.i32();
      m.cause.status = get_status(r);
      m.cause.signal = r.i32();
      m.cause.spawn_errno = r.i32();
      m.cause.host = r.bytes(kMaxNameBytes, "host");
      m.cause.reason = r.bytes(kMaxMessageBytes, "reason");
      m.detail = r.bytes(kMaxMessageBytes, "detail");
      return m;
    }
    case MessageType::NodeDone:
      return NodeDone{r.u32()};
    case MessageType::Signal: {
      Signal m;
      m.signal = r.i32();
      auto mode = r.u8();
      if (mode > 2) throw ProtocolError(fmt::format("invalid signal mode {}", mode));
      m.mode = static_cast<SignalMode>(mode);
      return m;
    }
    case MessageType::Finish: {
      Finish m;
      m.exit_code = r.i32();
      m.summary = r.bytes(kMaxMessageBytes, "summary");
      return m;
    }
    case MessageType::Inspect: {
      Inspect m;
      m.id = r.u32();
      auto what = r.u8();
      if (what > 1) throw ProtocolError(fmt::format("invalid inspection {}", what));
      m.what = static_cast<InspectWhat>(what);
      m.native = r.u8() != 0;
      return m;
    }
    case MessageType::Inspection: {
      Inspection m;
      m.id = r.u32();
      m.progress_age_ms = r.u64();
      m.stacks = r.bytes(kMaxStacksBytes, "stacks");
      return m;
    }
    case MessageType::NodeSamples: {
      NodeSamples m;
      m.json = r.bytes(kMaxSamplesBytes, "samples");
      return m;
    }
    case MessageType::NodeExcluded: {
      NodeExcluded m;
      m.gpu = r.u32();
      m.reason = r.bytes(kMaxMessageBytes, "exclusion's reason");
      m.attempt = r.u32();
      return m;
    }
    case MessageType::Restart: {
      Restart m;
      m.attempt = r.u32();
      m.master_addr = r.bytes(kMaxNameBytes, "master address");
      m.master_port = r.u32();
      return m;
    }
  }
  throw ProtocolError(fmt::format("unknown message type {}", static_cast<int>(type)));
}

bool known_type(std::uint8_t t) { return (t >= 1 && t <= 14) || (t >= 20 && t <= 33); }

}  // namespace

MessageType type_of(const Message& message) { return kTypeOfIndex[message.index()]; }

std::string encode(const Message& message) {
  WireWriter w;
  w.u32(0);  // length, patched below
  w.u8(static_cast<std::uint8_t>(type_of(message)));
  std::visit([&](const auto& m) { put(w, m); }, message);
  auto& out = w.str();
  auto len = static_cast<std::uint32_t>(out.size() - kFrameHeaderSize);
  for (int i = 0; i < 4; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>(len >> (24 - 8 * i));
  return std::move(out);
}

Message decode(std::uint8_t type, std::string_view payload) {
  if (!known_type(type)) throw ProtocolError(fmt::format("unknown message type {}", type));
  return decode(static_cast<MessageType>(type), payload);
}

Message decode(MessageType type, std::string_view payload) {
  WireReader r(payload);
  auto m = get(type, r);
  // A hello of another version may carry more; everything else must fit exactly.
  bool other_version = (type == MessageType::ClientHello && std::get<ClientHello>(m).version != kProtocolVersion) ||
                       (type == MessageType::ServerHello && std::get<ServerHello>(m).version != kProtocolVersion);
  if (!other_version) r.expect_end(type_name(type));
  return m;
}

void FrameDecoder::feed(std::string_view bytes) {
  // Drop what was consumed before growing, so the buffer holds at most one
  // partial frame plus the new bytes.
  if (consumed_ > 0) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  buffer_.append(bytes);
}

std::optional<Frame> FrameDecoder::next() {
  std::string_view rest(buffer_);
  rest.remove_prefix(consumed_);
  if (rest.size() < kFrameHeaderSize) return std::nullopt;
  WireReader header(rest.substr(0, kFrameHeaderSize));
  auto length = header.u32();
  auto type = header.u8();
  if (length > max_payload_)
    throw ProtocolError(fmt::format("frame of {} bytes exceeds the limit of {}", length, max_payload_));
  if (rest.size() - kFrameHeaderSize < length) return std::nullopt;
  Frame f{type, std::string(rest.substr(kFrameHeaderSize, length))};
  consumed_ += kFrameHeaderSize + length;
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  }
  return f;
}

}  // namespace sgpu::rendezvous
