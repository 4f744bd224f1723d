// Include/exclude filters and the choice of hosts for a job (hosts.hpp).
#include <algorithm>
#include <cctype>
#include <numeric>

#include <fmt/format.h>

#include "backends/ssh/hosts.hpp"
#include "sgpu/env/error.hpp"

namespace sgpu::launcher::ssh {
namespace {

std::string host_names(const std::vector<HostEntry>& pool) {
  std::string out;
  for (const auto& h : pool) out += (out.empty() ? "" : ", ") + h.host;
  return out.empty() ? "none" : out;
}

const HostEntry& find_in_pool(const std::vector<HostEntry>& pool, const HostFilter& f, std::string_view flag) {
  for (const auto& h : pool)
    if (same_host(h.host, f.host)) return h;
  throw Error(fmt::format("{}: host '{}' is not in the host list; the hosts are: {}", flag, f.host, host_names(pool)));
}

void check_devices_in_range(const HostEntry& h, const HostFilter& f, std::string_view flag) {
  for (int d : f.devices)
    if (h.slots && d >= *h.slots)
      throw Error(fmt::format("{}: host '{}' has {} slot{} ({}), so its devices are 0 to {}; device {} is not one",
                              flag, h.host, *h.slots, *h.slots == 1 ? "" : "s", h.origin, *h.slots - 1, d));
}

std::string describe_candidate(const CandidateHost& c) {
  std::string type = c.entry.gpu_type.empty() ? "" : " " + c.entry.gpu_type;
  if (!c.known) return fmt::format("{} (slots not given{})", c.entry.host, type);
  if (c.pinned) {
    std::string list;
    for (int d : c.devices) list += (list.empty() ? "" : ",") + std::to_string(d);
    return fmt::format("{} (devices {}{})", c.entry.host, list, type);
  }
  return fmt::format("{} ({} slot{}{})", c.entry.host, c.devices.size(), c.devices.size() == 1 ? "" : "s", type);
}

NodeAssignment assign(const CandidateHost& c, int ranks) {
  NodeAssignment a{c.entry, ranks, {}};
  if (c.pinned) a.devices.assign(c.devices.begin(), c.devices.begin() + ranks);
  return a;
}

bool type_fits(const CandidateHost& c, std::string_view type) {
  return type.empty() || c.entry.gpu_type.empty() || same_host(c.entry.gpu_type, type);  // case-insensitive
}

}  // namespace

std::string describe_pool(const std::vector<CandidateHost>& pool) {
  std::string out;
  for (const auto& c : pool) out += (out.empty() ? "" : ", ") + describe_candidate(c);
  return out.empty() ? "no hosts" : out;
}

std::vector<CandidateHost> filter_hosts(const std::vector<HostEntry>& pool, const std::vector<HostFilter>& include,
                                        const std::vector<HostFilter>& exclude) {
  for (const auto& f : include) check_devices_in_range(find_in_pool(pool, f, "--include"), f, "--include");
  for (const auto& f : exclude) check_devices_in_range(find_in_pool(pool, f, "--exclude"), f, "--exclude");
  std::vector<CandidateHost> out;
  for (const auto& h : pool) {
    CandidateHost c{h, {}, h.slots.has_value(), false};
    if (h.slots) {
      c.devices.resize(static_cast<std::size_t>(*h.slots));
      std::iota(c.devices.begin(), c.devices.end(), 0);
    }
    if (!include.empty()) {
      auto f = std::find_if(include.begin(), include.end(), [&](auto& x) { return same_host(x.host, h.host); });
      if (f == include.end()) continue;
      if (!f->devices.empty()) c = {h, f->devices, true, true};
    }
    auto f = std::find_if(exclude.begin(), exclude.end(), [&](auto& x) { return same_host(x.host, h.host); });
    if (f != exclude.end()) {
      if (f->devices.empty()) continue;
      if (!c.known)
        throw Error(
            fmt::format("--exclude: host '{}' has no slot count ({}), so sgpu cannot tell which devices remain; give "
                        "'{} slots=N' in the hostfile or '{}:N' in --hosts, or name the devices to use with --include",
                        h.host, h.origin, h.host, h.host));
      std::erase_if(c.devices,
                    [&](int d) { return std::find(f->devices.begin(), f->devices.end(), d) != f->devices.end(); });
      c.pinned = true;
      if (c.devices.empty()) continue;
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<NodeAssignment> select_hosts(const std::vector<CandidateHost>& pool, const HostRequest& req) {
  std::vector<CandidateHost> eligible;
  std::vector<std::string> other_type;
  for (const auto& c : pool) {
    if (type_fits(c, req.gpu_type))
      eligible.push_back(c);
    else
      other_type.push_back(fmt::format("{} ({})", c.entry.host, c.entry.gpu_type));
  }
  std::string skipped;
  if (!other_type.empty()) {
    skipped = fmt::format("; not {}: ", req.gpu_type);
    for (std::size_t i = 0; i < other_type.size(); ++i) skipped += (i ? ", " : "") + other_type[i];
  }
  if (eligible.empty())
    throw Error(fmt::format("{} {}: {} has no {}hosts{}", req.ranks_flag, req.ranks, req.pool_name,
                            req.gpu_type.empty() ? "" : req.gpu_type + " ", skipped));

  std::vector<NodeAssignment> out;
  if (req.per_node) {
    int per = *req.per_node;
    if (per < 1 || req.ranks % per != 0)
      throw Error(fmt::format("{} {} is not a multiple of {} {}; give a total that fills whole nodes", req.ranks_flag,
                              req.ranks, req.per_node_flag, per));
    int nodes = req.ranks / per;
    for (const auto& c : eligible) {
      if (static_cast<int>(out.size()) == nodes) break;
      if (!c.known || static_cast<int>(c.devices.size()) >= per) out.push_back(assign(c, per));
    }
    if (static_cast<int>(out.size()) < nodes)
      throw Error(fmt::format("{} {} with {} {} needs {} hosts with {} free slots each; {} has {}: {}{}",
                              req.ranks_flag, req.ranks, req.per_node_flag, per, nodes, per, req.pool_name, out.size(),
                              describe_pool(eligible), skipped));
    return out;
  }
  int remaining = req.ranks;
  int total = 0;
  for (const auto& c : eligible) {
    if (remaining == 0) break;
    if (!c.known)
      throw Error(fmt::format(
          "host '{}' ({}) has no slot count, so sgpu cannot tell how many ranks it takes; write '{} slots=N' in the "
          "hostfile or '{}:N' in --hosts, or pass {} N",
          c.entry.host, c.entry.origin, c.entry.host, c.entry.host, req.per_node_flag));
    int take = std::min(static_cast<int>(c.devices.size()), remaining);
    out.push_back(assign(c, take));
    remaining -= take;
    total += take;
  }
  if (remaining > 0)
    throw Error(fmt::format("{} {}: {} has only {} slot{}: {}{}", req.ranks_flag, req.ranks, req.pool_name, total,
                            total == 1 ? "" : "s", describe_pool(eligible), skipped));
  return out;
}

}  // namespace sgpu::launcher::ssh
