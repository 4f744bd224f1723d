#pragma once
// The rendezvous protocol between the launcher and its node agents.
//
// A frame is a 4-byte big-endian payload length, a 1-byte message type and the
// payload. Before a peer has proven the run's secret its frames may be at most
// kMaxHelloPayload bytes; after, kMaxPayload. The first frame each way is a
// hello whose layout (magic, then version) never changes, so any two versions
// can tell each other apart and say so. Conversation (agent -> launcher):
//
//   ClientHello ->        <- ServerHello (or Reject: wrong version)
//   Auth ->               <- Welcome (or Reject: wrong secret)
//   Join ->               ... every node joins ...   <- Assign
//   [PreflightId ->       <- PreflightId]  (--preflight: node 0's NCCL id to the others)
//   Ready ->              ... every node is ready ... <- Start
//   RankStarted, RankOutput, RankOutputClosed, RankFile, RankExited,
//   NodeTeardown ->       <- Signal
//   NodeDone ->           ... every node is done ...  <- Finish
//
// With restarts (--max-restarts), an attempt that failed is followed, once
// every node is done and the backoff is over, by Restart instead of Finish;
// the run goes on from RankStarted. Node 0 reserves the next attempt's
// MASTER_PORT before it says NodeDone, so a restart needs no round trip.
//
// With --preflight, every node checks its GPUs between Assign and Ready: an
// NCCL all-reduce across all of them, whose unique id node 0's first worker
// makes and node 0 sends as PreflightId; the launcher passes it on to every
// other node. Each node's Ready carries its report, and the launcher judges
// them all before it says Start (or Abort, naming the GPU or node).
//
// Heartbeat flows both ways from Welcome on; Abort ends a rendezvous from
// either side. encode() and decode() are pure and unit-tested; FrameDecoder
// is the fuzzed entry point for bytes from the network.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sgpu/env/exit_code.hpp"
#include "sgpu/env/gpu.hpp"
#include "sgpu/rendezvous/wire.hpp"

namespace sgpu::rendezvous {

inline constexpr std::uint16_t kProtocolVersion =
    9;  // 4: Inspect, Inspection; 5: Probe, ProbeResult; 6: Join's network; 7: NodeSamples; 8: NodeExcluded;
        // 9: Assign's attempt (a spare taking a lost node's place), Restart to a node that is Ready
inline constexpr std::string_view kMagic = "SGPURDZV";
inline constexpr std::size_t kFrameHeaderSize = 5;
inline constexpr std::uint32_t kMaxHelloPayload = 1024;
inline constexpr std::uint32_t kMaxPayload = 1U << 20;
inline constexpr std::size_t kNonceSize = 32;
inline constexpr std::size_t kProofSize = 32;  // HMAC-SHA256
// Per-field limits: generous for real nodes, small enough that a frame can
// never make the launcher allocate much.
inline constexpr std::size_t kMaxNameBytes = 256;
inline constexpr std::size_t kMaxAddresses = 64;
inline constexpr std::size_t kMaxGpus = 256;
inline constexpr std::size_t kMaxInterfaces = 256;
inline constexpr std::size_t kMaxMessageBytes = 16 * 1024;
inline constexpr std::size_t kMaxFileBytes = 256 * 1024;  // error.json, result
inline constexpr std::size_t kMaxJobBytes = 512 * 1024;
inline constexpr std::size_t kMaxPreflightBytes = 256 * 1024;  // a node's preflight report (JSON)
inline constexpr std::size_t kMaxPreflightIdBytes = 1024;      // NCCL's unique id, as hex

using Nonce = std::array<std::uint8_t, kNonceSize>;
using Proof = std::array<std::uint8_t, kProofSize>;

enum class MessageType : std::uint8_t {
  ClientHello = 1,
  ServerHello = 2,
  Auth = 3,
  Reject = 4,
  Welcome = 5,
  Join = 6,
  Assign = 7,
  Ready = 8,
  Start = 9,
  Abort = 10,
  Heartbeat = 11,
  PreflightId = 12,
  Probe = 13,
  ProbeResult = 14,
  RankStarted = 20,
  RankOutput = 21,
  RankOutputClosed = 22,
  RankFile = 23,
  RankExited = 24,
  NodeTeardown = 25,
  NodeDone = 26,
  Inspection = 27,
  NodeSamples = 28,
  NodeExcluded = 29,
  Signal = 30,
  Finish = 31,
  Restart = 32,
  Inspect = 33,
};

struct ClientHello {
  std::uint16_t version = kProtocolVersion;
  Nonce nonce{};
  bool operator==(const ClientHello&) const = default;
};

// The launcher's proof binds the agent's nonce: an agent only obeys a
// launcher that knows the secret.
struct ServerHello {
  std::uint16_t version = kProtocolVersion;
  Nonce nonce{};
  Proof proof{};
  bool operator==(const ServerHello&) const = default;
};

struct Auth {
  Proof proof{};
  bool operator==(const Auth&) const = default;
};

// Sent before closing a connection that is refused: says why.
struct Reject {
  std::uint16_t version = kProtocolVersion;
  std::string reason;
  bool operator==(const Reject&) const = default;
};

struct Welcome {
  std::string run_id;
  std::uint32_t nnodes = 0;
  std::uint32_t heartbeat_timeout_ms = 0;
  std::string job;  // the launcher's job description (lib/launcher's format), opaque here
  bool operator==(const Welcome&) const = default;
};

// One network interface of a node, as its agent found it when it joined.
struct NetInterface {
  std::string name;
  std::vector<std::string> addresses;  // IPv4 first, then IPv6; link-local ones left out
  bool up = false;                     // administratively up and with a carrier (IFF_UP, IFF_RUNNING)
  std::uint32_t mtu = 0;
  std::string kind;  // "ether", "loopback", "infiniband", "other"
  bool operator==(const NetInterface&) const = default;
};

// An RDMA device (/sys/class/infiniband): its first port's link layer
// ("InfiniBand", or "Ethernet" for RoCE) and state ("ACTIVE", "DOWN"...).
struct RdmaDevice {
  std::string name;
  std::string link_layer;
  std::string state;
  bool operator==(const RdmaDevice&) const = default;
};

struct Join {
  std::string name;      // how the launcher names this node (the backend's name, else hostname)
  std::string hostname;  // gethostname()
  std::vector<std::string> addresses;
  std::vector<env::Gpu> gpus;
  std::uint32_t local_ranks = 0;
  std::int32_t node_rank = -1;  // -1: any
  std::uint32_t nnodes = 0;     // what the agent was told the job has; 0: whatever the launcher says
  std::int32_t pid = 0;
  // The node's network (issue 29): what NCCL and gloo will choose from.
  std::vector<NetInterface> interfaces;
  std::vector<RdmaDevice> rdma;
  std::string hostname_address;  // what `hostname` resolves to there ("" unresolved): 127.0.1.1 misleads gloo
  bool operator==(const Join&) const = default;
};

struct Assign {
  std::uint32_t node_rank = 0;
  std::uint32_t nnodes = 0;
  std::uint32_t rank_base = 0;
  std::uint32_t world_size = 0;
  // A spare taking a lost node's place during the run (--spares), from
  // attempt `attempt` on: no preflight, and Restart, not Start, starts its ranks.
  bool spare = false;
  std::uint32_t attempt = 0;
  bool operator==(const Assign&) const = default;
};

struct Ready {
  std::uint32_t master_port = 0;  // node 0: the port it reserved; others 0
  std::string preflight;          // --preflight: this node's report (JSON); "" without
  bool operator==(const Ready&) const = default;
};

struct Start {
  std::string master_addr;
  std::uint32_t master_port = 0;
  bool operator==(const Start&) const = default;
};

// The reachability check, once every node is ready and before any rank
// starts: node 0 listens on MASTER_PORT (`listen`), then every other node
// connects to MASTER_ADDR:MASTER_PORT within `timeout_ms`. Each answers with
// a ProbeResult; node 0 stops listening when Start (or the end) comes.
struct Probe {
  std::string master_addr;
  std::uint32_t master_port = 0;
  bool listen = false;
  std::uint32_t timeout_ms = 5000;
  bool operator==(const Probe&) const = default;
};

// `ok`, or what failed ("connection refused", "no answer in 5s"); the
// interface the node's kernel routes MASTER_ADDR through ("" unknown) and
// how long the connect took.
struct ProbeResult {
  bool ok = false;
  std::string error;
  std::string interface;
  std::uint32_t elapsed_us = 0;
  bool operator==(const ProbeResult&) const = default;
};

// A rendezvous that cannot go on: the launcher tells every agent why, or an
// agent tells the launcher it cannot run its part. `exit_code` is sgpu's.
struct Abort {
  std::string message;
  std::int32_t exit_code = 1;
  bool operator==(const Abort&) const = default;
};

struct Heartbeat {
  bool operator==(const Heartbeat&) const = default;
};

// --preflight: the NCCL unique id of the all-reduce across every node's GPUs
// (hex), made by node 0's first worker; node 0 -> launcher -> other nodes.
struct PreflightId {
  std::string id;
  bool operator==(const PreflightId&) const = default;
};

enum class OutputStream : std::uint8_t { Out = 0, Err = 1 };
enum class RankFileKind : std::uint8_t { Error = 0, Result = 1 };

struct RankStarted {
  std::uint32_t rank = 0;
  std::int32_t pid = 0;
  bool operator==(const RankStarted&) const = default;
};

struct RankOutput {
  std::uint32_t rank = 0;
  OutputStream stream = OutputStream::Out;
  std::string bytes;
  bool operator==(const RankOutput&) const = default;
};

struct RankOutputClosed {
  std::uint32_t rank = 0;
  OutputStream stream = OutputStream::Out;
  bool operator==(const RankOutputClosed&) const = default;
};

struct RankFile {
  std::uint32_t rank = 0;
  RankFileKind kind = RankFileKind::Error;
  std::string content;
  bool operator==(const RankFile&) const = default;
};

struct RankExited {
  std::uint32_t rank = 0;
  env::ExitStatus status;
  bool terminated_by_sgpu = false;
  bool operator==(const RankExited&) const = default;
};

// Why an agent began tearing its ranks down on its own (a local rank failed,
// it got a signal, a rank could not start).
struct NodeTeardown {
  env::JobEnd cause;
  std::string detail;
  bool operator==(const NodeTeardown&) const = default;
};

// Every rank of this node's attempt has ended and its output is sent.
struct NodeDone {
  // Node 0, when another attempt may follow: the MASTER_PORT it reserved for
  // it (0: none; the next attempt keeps the port it had).
  std::uint32_t next_master_port = 0;
  bool operator==(const NodeDone&) const = default;
};

enum class SignalMode : std::uint8_t {
  Forward = 0,   // pass it to every rank as it is (SIGUSR1 for a checkpoint)
  Teardown = 1,  // stop the job: this signal now, SIGKILL after the grace
  Kill = 2,      // SIGKILL every rank now
};

struct Signal {
  std::int32_t signal = 0;
  SignalMode mode = SignalMode::Teardown;
  bool operator==(const Signal&) const = default;
};

struct Finish {
  std::int32_t exit_code = 0;
  std::string summary;  // the launcher's one-line verdict, for the agent's log
  bool operator==(const Finish&) const = default;
};

// The launcher's word, after every node said NodeDone, to start this node's
// ranks again as attempt `attempt` (TORCHELASTIC_RESTART_COUNT) with these
// MASTER_ADDR/PORT.
struct Restart {
  std::uint32_t attempt = 0;
  std::string master_addr;
  std::uint32_t master_port = 0;
  bool operator==(const Restart&) const = default;
};

// --hang-timeout and `sgpu stacks`: the launcher asks every node how long
// ago its ranks last made progress, or for their stacks; `id` pairs the
// answers with the question.
enum class InspectWhat : std::uint8_t { Progress = 0, Stacks = 1 };
struct Inspect {
  std::uint32_t id = 0;
  InspectWhat what = InspectWhat::Progress;
  bool native = false;  // Stacks: native frames too
  bool operator==(const Inspect&) const = default;
};

// A node's answer: the age of its newest progress (an output line, a
// heartbeat), and for Stacks its ranks' stacks (lib/launcher's JSON, opaque
// here; cut to fit a frame).
inline constexpr std::size_t kMaxStacksBytes = kMaxPayload - 4096;
struct Inspection {
  std::uint32_t id = 0;
  std::uint64_t progress_age_ms = 0;
  std::string stacks;
  bool operator==(const Inspection&) const = default;
};

// --sample-every: a node's sample of its ranks and GPUs (lib/launcher's
// JSON, opaque here), sent as its sampler takes it.
inline constexpr std::size_t kMaxSamplesBytes = kMaxPayload - 4096;
struct NodeSamples {
  std::string json;
  bool operator==(const NodeSamples&) const = default;
};

// --health-gate on a node: one of its GPUs left out for the rest of the run,
// before `attempt` (sent before that attempt's ranks start).
struct NodeExcluded {
  std::uint32_t gpu = 0;
  std::string reason;
  std::uint32_t attempt = 0;
  bool operator==(const NodeExcluded&) const = default;
};

using Message =
    std::variant<ClientHello, ServerHello, Auth, Reject, Welcome, Join, Assign, Ready, Start, Abort, Heartbeat,
                 PreflightId, RankStarted, RankOutput, RankOutputClosed, RankFile, RankExited, NodeTeardown, NodeDone,
                 Signal, Finish, Restart, Inspection, Inspect, Probe, ProbeResult, NodeSamples, NodeExcluded>;

MessageType type_of(const Message& message);
const char* type_name(MessageType type);

// The whole frame: header and payload.
std::string encode(const Message& message);

// Decodes one payload. Throws ProtocolError for an unknown type, a truncated
// or oversized field, or trailing bytes.
Message decode(MessageType type, std::string_view payload);
Message decode(std::uint8_t type, std::string_view payload);

struct Frame {
  std::uint8_t type = 0;
  std::string payload;
};

// Cuts a byte stream into frames. The limit applies to the declared length,
// so an oversized frame is refused before its bytes arrive.
class FrameDecoder {
 public:
  explicit FrameDecoder(std::uint32_t max_payload) : max_payload_(max_payload) {}

  void set_max_payload(std::uint32_t max_payload) { max_payload_ = max_payload; }
  void feed(std::string_view bytes);
  // The next whole frame, if one has arrived. Throws ProtocolError when the
  // next frame declares a payload above the limit.
  std::optional<Frame> next();
  std::size_t buffered() const { return buffer_.size() - consumed_; }

 private:
  std::string buffer_;
  std::size_t consumed_ = 0;
  std::uint32_t max_payload_;
};

}  // namespace sgpu::rendezvous
