#pragma once
// Remote hosts as users list them: hostfiles in the formats they already have
// (OpenMPI/DeepSpeed `host slots=N`, MPICH `host:N`), `--hosts a:8,b:8`, and
// DeepSpeed's `--include`/`--exclude` filters. Pure: the caller reads files.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/host_filter.hpp"

namespace sgpu::launcher::ssh {

struct HostEntry {
  std::string host;          // name or address, as ssh reaches it
  std::string user;          // "" means ssh's default (config, then the local user)
  std::optional<int> slots;  // GPUs (ranks) the host offers; nullopt when not said
  std::string gpu_type;      // "" when not said
  std::optional<int> port;   // ssh port; nullopt means the spec's, else ssh's
  std::string origin;        // where it was written, for messages: "hosts:3"
};

// `path` only names the file in messages ("hosts:3:7: ..."). Lines:
//   [user@]host [slots=N] [max_slots=N] [gpu_type=T] [port=P]   # comment
//   [user@]host:N                                               (MPICH)
// A host listed twice is an error naming both lines.
std::vector<HostEntry> parse_hostfile(std::string_view text, std::string_view path);

// "a:8,b:8", "alice@a:4,b", "[fe80::1]:2". `flag` names the option in messages.
std::vector<HostEntry> parse_hosts_list(std::string_view text, std::string_view flag = "--hosts");

// The include/exclude filters (backends/host_filter.hpp), by their old names here.
using launcher::HostFilter;
using launcher::parse_host_filter;

// A host still available after filtering, with the devices it may use.
struct CandidateHost {
  HostEntry entry;
  // Device indices the host may use. Empty with `known` false: the count is
  // not known here (no slots in the hostfile and no explicit --include).
  std::vector<int> devices;
  bool known = false;
  // True when a filter named or removed devices, so the host must use
  // exactly `devices`, not just as many.
  bool pinned = false;
};

// Applies --include (only these hosts/devices) then --exclude (not these).
// Names a host that is not in the pool, or a device past its slot count.
std::vector<CandidateHost> filter_hosts(const std::vector<HostEntry>& pool, const std::vector<HostFilter>& include,
                                        const std::vector<HostFilter>& exclude);

struct HostRequest {
  int ranks = 1;                            // --gpus (or --nproc x hosts)
  std::optional<int> per_node;              // --gpus-per-node
  std::string gpu_type;                     // --gpu-type; "" accepts any
  std::string pool_name = "the host list";  // "--hostfile hosts", for messages
  std::string ranks_flag = "--gpus";        // how the user asked, for messages
  std::string per_node_flag = "--gpus-per-node";
};

struct NodeAssignment {
  HostEntry entry;
  int ranks = 0;
  std::vector<int> devices;  // exactly these devices; empty: the node picks `ranks`
};

// Picks hosts in pool order to cover `ranks`: `per_node` on each when given,
// otherwise every slot of each host until covered. Throws sgpu::Error saying
// what the pool has when it cannot.
std::vector<NodeAssignment> select_hosts(const std::vector<CandidateHost>& pool, const HostRequest& request);

// "a (8 slots), b (4 slots)" for messages.
std::string describe_pool(const std::vector<CandidateHost>& pool);

}  // namespace sgpu::launcher::ssh
