// What `sgpu doctor` prints: the verdict tables as text, and the same as one
// JSON document.
#include <algorithm>

#include <fmt/format.h>

#include "preflight/health_json.hpp"
#include "sgpu/launcher/preflight/preflight.hpp"

namespace sgpu::launcher::preflight {
namespace {

std::string opt_text(const std::optional<unsigned long long>& v) { return v ? std::to_string(*v) : "-"; }

std::string verdict_cell(const Judgement& j) {
  if (j.verdict == Verdict::pass) return "pass";
  std::string reasons;
  for (const auto& r : j.reasons) reasons += (reasons.empty() ? "" : "; ") + r;
  return fmt::format("{}: {}", verdict_name(j.verdict), reasons);
}

std::string nccl_version_text(int code) {
  if (code <= 0) return "?";
  return code >= 10000 ? fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100)
                       : fmt::format("{}.{}.{}", code / 1000, code / 100 % 10, code % 100);
}

template <class T>
nlohmann::json opt_json(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

template <class T>
void opt_from(const nlohmann::json& j, const char* key, std::optional<T>& out) {
  if (auto it = j.find(key); it != j.end() && !it->is_null()) out = it->get<T>();
}

template <class T>
void from(const nlohmann::json& j, const char* key, T& out) {
  if (auto it = j.find(key); it != j.end()) out = it->get<T>();
}

nlohmann::json judgement_json(const Judgement& j) {
  return {{"verdict", verdict_name(j.verdict)}, {"reasons", j.reasons}};
}

}  // namespace

nlohmann::json gpu_json(const GpuHealth& g) {
  nlohmann::json j = {{"index", g.index},
                      {"name", g.name},
                      {"type", g.type},
                      {"uuid", g.uuid},
                      {"pci_bus_id", g.pci_bus_id},
                      {"memory_total", g.memory_total},
                      {"memory_used", g.memory_used},
                      {"pids", g.pids},
                      {"ecc_volatile_uncorrected", opt_json(g.ecc_volatile_uncorrected)},
                      {"ecc_aggregate_uncorrected", opt_json(g.ecc_aggregate_uncorrected)},
                      {"ecc_volatile_corrected", opt_json(g.ecc_volatile_corrected)},
                      {"retired_pages_pending", opt_json(g.retired_pages_pending)},
                      {"remapped_rows_pending", opt_json(g.remapped_rows_pending)},
                      {"remap_failed", opt_json(g.remap_failed)},
                      {"throttle_reasons", opt_json(g.throttle_reasons)},
                      {"temperature_c", opt_json(g.temperature_c)},
                      {"persistence_mode", opt_json(g.persistence_mode)},
                      {"mig_enabled", opt_json(g.mig_enabled)},
                      {"compute_mode", opt_json(g.compute_mode)},
                      {"nvlinks_active", g.nvlinks_active},
                      {"nvlinks_inactive", g.nvlinks_inactive},
                      {"health_read", g.read}};
  if (!g.node.empty()) j["node"] = g.node;
  return j;
}

nlohmann::json link_json(const LinkHealth& l) {
  nlohmann::json j = {{"a", l.a},
                      {"b", l.b},
                      {"path", l.path},
                      {"p2p_read", opt_json(l.p2p_read)},
                      {"p2p_nvlink", opt_json(l.p2p_nvlink)}};
  if (!l.node.empty()) j["node"] = l.node;
  return j;
}

GpuHealth gpu_from_json(const nlohmann::json& j) {
  GpuHealth g;
  from(j, "node", g.node);
  from(j, "index", g.index);
  from(j, "name", g.name);
  from(j, "type", g.type);
  from(j, "uuid", g.uuid);
  from(j, "pci_bus_id", g.pci_bus_id);
  from(j, "memory_total", g.memory_total);
  from(j, "memory_used", g.memory_used);
  from(j, "pids", g.pids);
  opt_from(j, "ecc_volatile_uncorrected", g.ecc_volatile_uncorrected);
  opt_from(j, "ecc_aggregate_uncorrected", g.ecc_aggregate_uncorrected);
  opt_from(j, "ecc_volatile_corrected", g.ecc_volatile_corrected);
  opt_from(j, "retired_pages_pending", g.retired_pages_pending);
  opt_from(j, "remapped_rows_pending", g.remapped_rows_pending);
  opt_from(j, "remap_failed", g.remap_failed);
  opt_from(j, "throttle_reasons", g.throttle_reasons);
  opt_from(j, "temperature_c", g.temperature_c);
  opt_from(j, "persistence_mode", g.persistence_mode);
  opt_from(j, "mig_enabled", g.mig_enabled);
  opt_from(j, "compute_mode", g.compute_mode);
  from(j, "nvlinks_active", g.nvlinks_active);
  from(j, "nvlinks_inactive", g.nvlinks_inactive);
  from(j, "health_read", g.read);
  return g;
}

LinkHealth link_from_json(const nlohmann::json& j) {
  LinkHealth l;
  from(j, "node", l.node);
  from(j, "a", l.a);
  from(j, "b", l.b);
  from(j, "path", l.path);
  opt_from(j, "p2p_read", l.p2p_read);
  opt_from(j, "p2p_nvlink", l.p2p_nvlink);
  return l;
}

std::string preflight_text(const PreflightResult& r) {
  if (r.status == PreflightResult::Status::unavailable)
    return fmt::format("sgpu doctor: not checked: {}\n", r.unavailable);
  // Across nodes, a node column first (as wide as the longest name).
  std::size_t node_width = 0, nodes = 0;
  std::string last_node;
  for (const auto& row : r.gpus) {
    node_width = std::max(node_width, row.health.node.size());
    if (row.health.node != last_node || nodes == 0) ++nodes;
    last_node = row.health.node;
  }
  auto node_cell = [&](const std::string& node) {
    return node_width == 0 ? std::string() : fmt::format("{:<{}} ", node, std::max<std::size_t>(node_width, 4));
  };
  std::string out =
      fmt::format("sgpu doctor: {} GPU{}{}, NCCL {}, {:.1f}s\n\n", r.gpus.size(), r.gpus.size() == 1 ? "" : "s",
                  node_width > 0 ? fmt::format(" on {} node{}", nodes, nodes == 1 ? "" : "s") : "",
                  nccl_version_text(r.nccl_version), r.duration_s);
  if (!r.health_note.empty()) out += r.health_note + "\n";
  out +=
      node_cell("node") + fmt::format("{:<4} {:<8} {:<17} {:>13} {:>5} {:>11} {:>6} {:>8}  {}\n", "GPU", "type",
                                      "PCI bus", "memory used", "temp", "ECC unc v/a", "procs", "NVLinks", "verdict");
  for (const auto& row : r.gpus) {
    const auto& g = row.health;
    auto gib = [](std::uint64_t b) { return static_cast<double>(b) / static_cast<double>(1ULL << 30); };
    out +=
        node_cell(g.node) +
        fmt::format("{:<4} {:<8} {:<17} {:>13} {:>5} {:>11} {:>6} {:>8}  {}\n", g.index, g.type, g.pci_bus_id,
                    fmt::format("{:.1f}/{:.0f} GiB", gib(g.memory_used), gib(g.memory_total)),
                    g.temperature_c ? fmt::format("{}C", *g.temperature_c) : "-",
                    opt_text(g.ecc_volatile_uncorrected) + "/" + opt_text(g.ecc_aggregate_uncorrected), g.pids.size(),
                    g.nvlinks_active + g.nvlinks_inactive > 0
                        ? fmt::format("{}/{}", g.nvlinks_active, g.nvlinks_active + g.nvlinks_inactive)
                        : "-",
                    verdict_cell(row.judgement));
  }
  if (!r.links.empty()) {
    out += "\n" + node_cell("node") +
           fmt::format("{:<8} {:<5} {:>4} {:>7}  {}\n", "link", "path", "P2P", "NVLink", "verdict");
    for (const auto& row : r.links) {
      const auto& l = row.link;
      auto yn = [](const std::optional<bool>& v) { return v ? (*v ? "yes" : "no") : "-"; };
      out += node_cell(l.node) + fmt::format("{:<8} {:<5} {:>4} {:>7}  {}\n", fmt::format("{}-{}", l.a, l.b), l.path,
                                             yn(l.p2p_read), yn(l.p2p_nvlink), verdict_cell(row.judgement));
    }
  }
  if (!r.sizes.empty()) {
    out += fmt::format("\nall-reduce, float32 sum (algbw, busbw as nccl-tests' all_reduce_perf)\n");
    out += fmt::format("{:>10} {:>12} {:>12} {:>12}\n", "size", "time (us)", "algbw GB/s", "busbw GB/s");
    for (const auto& s : r.sizes)
      out += fmt::format("{:>10} {:>12.1f} {:>12.2f} {:>12.2f}\n", format_bytes(s.bytes), s.bandwidth.time_us,
                         s.bandwidth.algbw_gbps, s.bandwidth.busbw_gbps);
  }
  if (r.expectation)
    out += fmt::format("expected busbw: {:.3g} GB/s ({})\n", r.expectation->busbw_gbps, r.expectation->source);
  out += fmt::format("all-reduce: {}\n", verdict_cell(r.allreduce));
  if (r.status == PreflightResult::Status::failed) {
    out += "\nFAIL\n";
    for (const auto& f : r.failures) out += "  " + f + "\n";
  } else {
    out += fmt::format("\n{}\n", r.verdict == Verdict::warn ? "healthy, with warnings" : "healthy");
  }
  return out;
}

std::string preflight_headline(const PreflightResult& r) {
  switch (r.status) {
    case PreflightResult::Status::unavailable:
      return "preflight: not checked: " + r.unavailable;
    case PreflightResult::Status::failed:
      return fmt::format("preflight: failed in {:.1f}s: {}", r.duration_s,
                         r.failures.empty() ? "a check failed" : r.failures.front());
    case PreflightResult::Status::healthy:
      break;
  }
  std::string bw = r.sizes.empty() || r.gpus.size() < 2
                       ? ""
                       : fmt::format(" (busbw {:.1f} GB/s at {})", r.sizes.back().bandwidth.busbw_gbps,
                                     format_bytes(r.sizes.back().bytes));
  std::size_t nodes = 0;
  for (std::size_t i = 0; i < r.gpus.size(); ++i)
    nodes += !r.gpus[i].health.node.empty() && (i == 0 || r.gpus[i].health.node != r.gpus[i - 1].health.node);
  return fmt::format("preflight: {} GPU{}{} healthy{} in {:.1f}s{}", r.gpus.size(), r.gpus.size() == 1 ? "" : "s",
                     nodes > 0 ? fmt::format(" on {} node{}", nodes, nodes == 1 ? "" : "s") : "",
                     r.verdict == Verdict::warn ? " with warnings" : "", r.duration_s, bw);
}

nlohmann::json preflight_json(const PreflightResult& r) {
  auto status = r.status == PreflightResult::Status::healthy  ? "healthy"
                : r.status == PreflightResult::Status::failed ? "failed"
                                                              : "unavailable";
  if (r.status == PreflightResult::Status::unavailable)
    return {{"status", status}, {"exit_code", preflight_exit_code(r)}, {"reason", r.unavailable}};
  nlohmann::json doc = {{"status", status},
                        {"exit_code", preflight_exit_code(r)},
                        {"verdict", verdict_name(r.verdict)},
                        {"duration_s", r.duration_s},
                        {"failures", r.failures}};
  doc["nccl_version"] = nccl_version_text(r.nccl_version);
  doc["health_read"] = r.health_read;
  if (!r.health_note.empty()) doc["health_note"] = r.health_note;
  doc["gpus"] = nlohmann::json::array();
  for (const auto& row : r.gpus) {
    auto gpu = gpu_json(row.health);
    gpu["verdict"] = judgement_json(row.judgement);
    doc["gpus"].push_back(std::move(gpu));
  }
  doc["links"] = nlohmann::json::array();
  for (const auto& row : r.links) {
    auto link = link_json(row.link);
    link["verdict"] = judgement_json(row.judgement);
    doc["links"].push_back(std::move(link));
  }
  doc["allreduce"] = {{"verdict", judgement_json(r.allreduce)}, {"sizes", nlohmann::json::array()}};
  for (const auto& s : r.sizes) {
    doc["allreduce"]["sizes"].push_back({{"bytes", s.bytes},
                                         {"time_us", s.bandwidth.time_us},
                                         {"algbw_gbps", s.bandwidth.algbw_gbps},
                                         {"busbw_gbps", s.bandwidth.busbw_gbps},
                                         {"rank_time_us", s.rank_times_us}});
  }
  if (r.expectation)
    doc["allreduce"]["expected"] = {
        {"type", r.expectation->type}, {"busbw_gbps", r.expectation->busbw_gbps}, {"source", r.expectation->source}};
  return doc;
}

}  // namespace sgpu::launcher::preflight
