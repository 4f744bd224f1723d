#pragma once
// The rendezvous's decisions, as pure functions: whether a node may join,
// which node rank each node gets, where each node's global ranks start, which
// address of node 0 the others should use, and who is missing at a timeout.
#include <cstdint>
#include <string>
#include <vector>

#include "sgpu/rendezvous/protocol.hpp"

namespace sgpu::rendezvous {

struct JoinCheck {
  enum class Kind {
    Accept,    // it joins
    Refuse,    // this peer alone is turned away (the job is full, a bad request)
    Conflict,  // the rendezvous cannot succeed (two nodes claim one rank, nnodes differ)
  };
  Kind kind = Kind::Accept;
  std::string message;
};

// `joined`: how many nodes are already in; `holder`: the one of them that
// asked for the candidate's node rank, if any (the server keeps them by
// requested rank, so a join costs the same for node 16384 as for node 2).
JoinCheck check_join(std::size_t joined, const Join* holder, const Join& candidate, std::uint32_t nnodes);

// Node ranks for a full set of joins (in arrival order): a requested rank is
// honoured; the others fill the free ranks sorted by name, so the same hosts
// get the same ranks whatever order they connect in. Expects check_join to
// have accepted each of them.
std::vector<std::uint32_t> assign_node_ranks(const std::vector<Join>& joined, std::uint32_t nnodes);

// First global rank of each node, by node rank.
std::vector<std::uint32_t> rank_bases(const std::vector<std::uint32_t>& local_ranks_by_node);

struct MasterAddrInputs {
  std::string override_addr;  // --master-addr
  std::string node0_peer;     // node 0's address as the launcher saw its connection
  // The launcher's own address on the other nodes' connections: an address
  // they reach the launcher's host by.
  std::vector<std::string> launcher_addresses_seen;
};

// MASTER_ADDR: the override; else node 0's address as the launcher saw it,
// unless that is loopback (node 0 runs beside the launcher), in which case
// the address the other nodes reached the launcher's host by; 127.0.0.1 when
// every node is local.
std::string choose_master_addr(const MasterAddrInputs& in);

// The nodes' names (by node rank) as the output shows them: a name two nodes
// share (the same hostname, containers with one) becomes "name#<node rank>"
// on each, so no two nodes' lines read alike. Pure.
std::vector<std::string> distinct_node_names(const std::vector<std::string>& names);

// For a join timeout: "1 of 3 nodes joined (a as node rank 0); missing: b
// (node rank 1), node rank 2". `expected_names` (by node rank) may be empty.
std::string describe_missing(const std::vector<Join>& joined, std::uint32_t nnodes,
                             const std::vector<std::string>& expected_names);

}  // namespace sgpu::rendezvous
