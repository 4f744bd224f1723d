// Each message type's name, for protocol errors and logs.
#include "sgpu/rendezvous/protocol.hpp"

namespace sgpu::rendezvous {

const char* type_name(MessageType type) {
  switch (type) {
    case MessageType::ClientHello:
      return "ClientHello";
    case MessageType::ServerHello:
      return "ServerHello";
    case MessageType::Auth:
      return "Auth";
    case MessageType::Reject:
      return "Reject";
    case MessageType::Welcome:
      return "Welcome";
    case MessageType::Join:
      return "Join";
    case MessageType::Assign:
      return "Assign";
    case MessageType::Ready:
      return "Ready";
    case MessageType::Start:
      return "Start";
    case MessageType::Abort:
      return "Abort";
    case MessageType::Heartbeat:
      return "Heartbeat";
    case MessageType::PreflightId:
      return "PreflightId";
    case MessageType::Probe:
      return "Probe";
    case MessageType::ProbeResult:
      return "ProbeResult";
    case MessageType::RankStarted:
      return "RankStarted";
    case MessageType::RankOutput:
      return "RankOutput";
    case MessageType::RankOutputClosed:
      return "RankOutputClosed";
    case MessageType::RankFile:
      return "RankFile";
    case MessageType::RankExited:
      return "RankExited";
    case MessageType::NodeTeardown:
      return "NodeTeardown";
    case MessageType::NodeDone:
      return "NodeDone";
    case MessageType::Signal:
      return "Signal";
    case MessageType::Finish:
      return "Finish";
    case MessageType::Restart:
      return "Restart";
    case MessageType::Inspect:
      return "Inspect";
    case MessageType::Inspection:
      return "Inspection";
    case MessageType::NodeSamples:
      return "NodeSamples";
    case MessageType::NodeExcluded:
      return "NodeExcluded";
  }
  return "unknown";
}

}  // namespace sgpu::rendezvous
