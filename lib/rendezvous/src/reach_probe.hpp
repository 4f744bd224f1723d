#pragma once
// A node's part of the reachability check (protocol.hpp, Probe): node 0
// listens on MASTER_PORT until the probe is dropped (at Start, before its
// ranks bind the port); every other node connects to MASTER_ADDR:MASTER_PORT
// once, within the probe's time, and closes at once. The listener never
// accepts: the connections it queued are reset when it closes, so nothing
// lingers on MASTER_PORT (TIME_WAIT) to refuse rank 0's plain bind.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>

#include "sgpu/rendezvous/protocol.hpp"

namespace sgpu::rendezvous {

class ReachProbe {
 public:
  struct Place {
    std::string source;       // a connecting node's connection leaves from it (connect_from; "": the kernel's choice)
    std::uint32_t peers = 0;  // how many nodes connect to node 0's listener
  };
  // `done` gets the result once, from the loop.
  ReachProbe(boost::asio::io_context& io, const Probe& probe, Place place,
             std::function<void(const ProbeResult&)> done);
  ~ReachProbe();
  ReachProbe(const ReachProbe&) = delete;
  ReachProbe& operator=(const ReachProbe&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace sgpu::rendezvous
