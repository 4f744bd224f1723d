#include "sgpu/launcher/preflight/preflight.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>

#include <fmt/format.h>

#include "devices/shared_library.hpp"
#include "preflight/allreduce_run.hpp"
#include "sgpu/env/duration.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/devices/devices.hpp"

namespace sgpu::launcher::preflight {

void judge_all(PreflightResult& r, const HealthReport& health, const AllReduceOutcome& outcome, std::size_t gpu_count) {
  r.health_read = health.ok;
  if (!health.ok) {
    r.health_note = "NVML could not be read, so health and topology were not checked: " + health.error;
    r.verdict = Verdict::warn;
  }
  for (const auto& g : health.gpus) {
    GpuRow row{g, judge_gpu(g)};
    r.verdict = worst(r.verdict, row.judgement.verdict);
    if (row.judgement.verdict == Verdict::fail) {
      for (const auto& why : row.judgement.reasons) r.failures.push_back(fmt::format("{}: {}", gpu_label(g), why));
    }
    r.gpus.push_back(std::move(row));
  }
  auto nvlinks = [&](const std::string& node, int index) {
    for (const auto& g : health.gpus) {
      if (g.node == node && g.index == index) return g.nvlinks_active;
    }
    return 0;
  };
  for (const auto& l : health.links) {
    LinkRow row{l, judge_link(l, nvlinks(l.node, l.a), nvlinks(l.node, l.b))};
    r.verdict = worst(r.verdict, row.judgement.verdict);
    r.links.push_back(std::move(row));
  }

  r.sizes = outcome.sizes;
  r.nccl_version = outcome.nccl_version;
  for (const auto& f : outcome.failures) {
    r.allreduce.verdict = Verdict::fail;
    r.allreduce.reasons.push_back(f);
    r.failures.push_back(f);
  }
  if (outcome.failures.empty() && !r.sizes.empty()) {
    auto bw = judge_bandwidth(r.sizes.back().bandwidth.busbw_gbps, static_cast<int>(gpu_count), r.expectation);
    r.allreduce = bw;
    if (bw.verdict == Verdict::fail) {
      for (const auto& why : bw.reasons)
        r.failures.push_back(
            fmt::format("all-reduce across {} GPUs at {}: {}", gpu_count, format_bytes(r.sizes.back().bytes), why));
    }
  }
  r.verdict = worst(r.verdict, r.allreduce.verdict);
  r.status = r.verdict == Verdict::fail ? PreflightResult::Status::failed : PreflightResult::Status::healthy;
}

void keep_report(const PreflightResult& r, const std::filesystem::path& run_dir) {
  if (run_dir.empty()) return;
  std::filesystem::create_directories(run_dir);
  std::ofstream out(run_dir / "preflight.json");
  out << preflight_json(r).dump(2) << "\n";
  if (!out) throw Error(fmt::format("{}: cannot write the preflight report", (run_dir / "preflight.json").string()), 1);
}

std::string gpu_label(const GpuHealth& g) {
  auto gpu = g.pci_bus_id.empty() ? fmt::format("GPU {}", g.index) : fmt::format("GPU {} ({})", g.index, g.pci_bus_id);
  return g.node.empty() ? gpu : fmt::format("{} {}", g.node, gpu);
}

std::string format_bytes(std::uint64_t bytes) {
  constexpr std::pair<std::uint64_t, const char*> units[] = {
      {1ULL << 30, "GiB"}, {1ULL << 20, "MiB"}, {1ULL << 10, "KiB"}};
  for (const auto& [unit, name] : units) {
    if (bytes >= unit && bytes % unit == 0) return fmt::format("{} {}", bytes / unit, name);
  }
  for (const auto& [unit, name] : units) {
    if (bytes >= unit) return fmt::format("{:.1f} {}", static_cast<double>(bytes) / static_cast<double>(unit), name);
  }
  return fmt::format("{} B", bytes);
}

PreflightResult run_preflight(const PreflightRequest& request) {
  auto started = std::chrono::steady_clock::now();
  PreflightResult r;
  auto finish = [&] {
    r.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    keep_report(r, request.run_dir);
    return r;
  };
  if (request.gpus.empty()) {
    r.status = PreflightResult::Status::unavailable;
    r.unavailable = "no GPU: nothing to check";
    return finish();
  }
  if (SharedLibrary nccl("libnccl.so.2"); !nccl.loaded()) {
    r.status = PreflightResult::Status::unavailable;
    r.unavailable = "no NCCL: " + nccl.error();
    return finish();
  }
  auto health = query_health(request.gpus);
  auto outcome = run_allreduce(request);
  if (!outcome.unavailable.empty()) {
    r.status = PreflightResult::Status::unavailable;
    r.unavailable = outcome.unavailable;
    return finish();
  }
  const auto& first = request.gpus.front();
  r.expectation = expectation_for(first.type, first.name, request.expect_busbw);
  judge_all(r, health, outcome, request.gpus.size());
  return finish();
}

PreflightRequest preflight_request(const JobSpec& spec) {
  const auto& p = spec.preflight;
  PreflightRequest request;
  auto where = [&](std::string_view key, const std::string& value) {
    return where_set(spec, key, fmt::format("{} = {}", key, value));
  };
  std::uint64_t max_bytes = 0;
  try {
    max_bytes = parse_bytes(p.max_bytes, "preflight.max_bytes");
  } catch (const Error&) {
    throw Error(fmt::format("{}: not a size; write bytes as 8, 64K, 1M or 1G (powers of 1024)",
                            where("preflight.max_bytes", p.max_bytes)),
                kExitUsage);
  }
  if (max_bytes < 8)
    throw Error(fmt::format("{}: the largest all-reduce must be at least 8 bytes (8, 64K, 1M, 1G)",
                            where("preflight.max_bytes", p.max_bytes)),
                kExitUsage);
  request.sizes = allreduce_sizes(8, max_bytes, 2);
  request.iters = p.iters;
  request.warmup = std::min(5, p.iters);
  const auto& limit = p.timeout.limit();
  if (!limit)
    throw Error(fmt::format("{}: the preflight needs a limit, so a hung all-reduce cannot hang the launch",
                            where("preflight.timeout", p.timeout.text())),
                kExitUsage);
  request.timeout = std::chrono::ceil<std::chrono::milliseconds>(*limit);
  if (!p.expect_busbw.empty()) {
    double gbps = 0;
    auto [end, ec] = std::from_chars(p.expect_busbw.data(), p.expect_busbw.data() + p.expect_busbw.size(), gbps);
    if (ec != std::errc() || end != p.expect_busbw.data() + p.expect_busbw.size() || !(gbps > 0))
      throw Error(fmt::format("{}: not a bandwidth; write GB/s as a positive number, e.g. 350 or 0.5",
                              where("preflight.expect_busbw", p.expect_busbw)),
                  kExitUsage);
    request.expect_busbw = gbps;
  }
  return request;
}

PreflightResult preflight_gpus(const std::vector<int>& gpu_indices, PreflightRequest request) {
  auto discovery = discover_gpus(request.environment);
  if (discovery.source == "none") {
    PreflightResult r;
    r.status = PreflightResult::Status::unavailable;
    r.unavailable = discovery.note;
    return r;
  }
  request.gpus.clear();
  for (int index : gpu_indices) {
    auto it =
        std::find_if(discovery.gpus.begin(), discovery.gpus.end(), [&](const env::Gpu& g) { return g.index == index; });
    if (it == discovery.gpus.end())
      throw Error(fmt::format("preflight: this node has no GPU {} ({})", index,
                              discovery.gpus.empty() ? discovery.note : env::describe_inventory(discovery.gpus)));
    request.gpus.push_back(*it);
  }
  return run_preflight(request);
}

std::optional<Error> launch_refusal(const PreflightResult& r, const std::string& report_path) {
  switch (r.status) {
    case PreflightResult::Status::healthy:
      return std::nullopt;
    case PreflightResult::Status::failed: {
      std::string every;
      if (r.failures.size() > 1) {
        for (const auto& f : r.failures) every += fmt::format("\n  {}", f);
      }
      return Error(fmt::format("{}; no rank was started (report: {}){}", preflight_headline(r), report_path, every),
                   kExitCheckFailed);
    }
    case PreflightResult::Status::unavailable:
      return Error(fmt::format("{}; no rank was started: --preflight asks for the check (drop it to launch unchecked)",
                               preflight_headline(r)),
                   kExitUnavailable);
  }
  return std::nullopt;
}

int preflight_exit_code(const PreflightResult& r) {
  switch (r.status) {
    case PreflightResult::Status::healthy:
      return 0;
    case PreflightResult::Status::failed:
      return kExitCheckFailed;
    case PreflightResult::Status::unavailable:
      return kExitUnavailable;
  }
  return kExitCheckFailed;
}

}  // namespace sgpu::launcher::preflight
