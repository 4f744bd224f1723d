// What `sgpu doctor` prints: the verdict tables as text, and the same as one
// JSON document.
#include <fmt/format.h>

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

nlohmann::json judgement_json(const Judgement& j) {
  return {{"verdict", verdict_name(j.verdict)}, {"reasons", j.reasons}};
}

}  // namespace

std::string preflight_text(const PreflightResult& r) {
  if (r.status == PreflightResult::Status::unavailable)
    return fmt::format("sgpu doctor: not checked: {}\n", r.unavailable);
  std::string out = fmt::format("sgpu doctor: {} GPU{}, NCCL {}, {:.1f}s\n\n", r.gpus.size(),
                                r.gpus.size() == 1 ? "" : "s", nccl_version_text(r.nccl_version), r.duration_s);
  if (!r.health_note.empty()) out += r.health_note + "\n";
  out += fmt::format("{:<4} {:<8} {:<17} {:>13} {:>5} {:>11} {:>6} {:>8}  {}\n", "GPU", "type", "PCI bus",
                     "memory used", "temp", "ECC unc v/a", "procs", "NVLinks", "verdict");
  for (const auto& row : r.gpus) {
    const auto& g = row.health;
    auto gib = [](std::uint64_t b) { return static_cast<double>(b) / static_cast<double>(1ULL << 30); };
    out +=
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
    out += fmt::format("\n{:<8} {:<5} {:>4} {:>7}  {}\n", "link", "path", "P2P", "NVLink", "verdict");
    for (const auto& row : r.links) {
      const auto& l = row.link;
      auto yn = [](const std::optional<bool>& v) { return v ? (*v ? "yes" : "no") : "-"; };
      out += fmt::format("{:<8} {:<5} {:>4} {:>7}  {}\n", fmt::format("{}-{}", l.a, l.b), l.path, yn(l.p2p_read),
                         yn(l.p2p_nvlink), verdict_cell(row.judgement));
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
  return fmt::format("preflight: {} GPU{} healthy{} in {:.1f}s{}", r.gpus.size(), r.gpus.size() == 1 ? "" : "s",
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
    const auto& g = row.health;
    doc["gpus"].push_back({{"index", g.index},
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
                           {"verdict", judgement_json(row.judgement)}});
  }
  doc["links"] = nlohmann::json::array();
  for (const auto& row : r.links) {
    doc["links"].push_back({{"a", row.link.a},
                            {"b", row.link.b},
                            {"path", row.link.path},
                            {"p2p_read", opt_json(row.link.p2p_read)},
                            {"p2p_nvlink", opt_json(row.link.p2p_nvlink)},
                            {"verdict", judgement_json(row.judgement)}});
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
