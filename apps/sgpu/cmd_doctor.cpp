// `sgpu doctor`: is this node's GPU stack fit for a job? NVML health and
// topology of the chosen GPUs, then an NCCL all-reduce across them, with a
// pass/warn/fail verdict per GPU and link. `--worker` is the per-GPU process
// it starts itself (internal).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "sgpu/env/duration.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/devices/devices.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/preflight/preflight.hpp"
#include "sgpu/launcher/preflight/worker.hpp"
#include "startup.hpp"

namespace sgpu::app {
namespace pf = launcher::preflight;

namespace {

struct DoctorOptions {
  std::string format = "text";
  int gpus = 0;
  std::string gpu_type;
  std::string timeout = "3m";
  std::string min_bytes = "8", max_bytes = "1G";
  int step_factor = 2;
  int warmup = 5, iters = 20;
  double expect_busbw = 0;  // 0: the GPU type's
  std::string report_dir;
  // --worker
  bool worker = false;
  int rank = 0, nranks = 1, device = 0;
  std::string sizes;
};

std::vector<std::uint64_t> split_sizes(const std::string& text) {
  std::vector<std::uint64_t> sizes;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ',');) sizes.push_back(pf::parse_bytes(part, "--sizes"));
  return sizes;
}

int print(const DoctorOptions& o, const pf::PreflightResult& r) {
  if (o.format == "json")
    launcher::output(pf::preflight_json(r).dump(2) + "\n");
  else
    launcher::output(pf::preflight_text(r));
  return pf::preflight_exit_code(r);
}

int unavailable(const DoctorOptions& o, std::string reason) {
  pf::PreflightResult r;
  r.status = pf::PreflightResult::Status::unavailable;
  r.unavailable = std::move(reason);
  return print(o, r);
}

int run_doctor(const DoctorOptions& o) {
  if (o.worker) {
    pf::WorkerOptions w{o.rank, o.nranks, o.device, split_sizes(o.sizes), o.warmup, o.iters, ""};
    if (const char* id = std::getenv(pf::kUniqueIdVariable)) w.unique_id_hex = id;
    return pf::run_worker(w);
  }
  pf::PreflightRequest request;
  request.sizes = pf::allreduce_sizes(pf::parse_bytes(o.min_bytes, "--min-bytes"),
                                      pf::parse_bytes(o.max_bytes, "--max-bytes"), o.step_factor);
  auto limit = env::parse_duration(o.timeout, "--timeout");
  if (!limit) throw Error("--timeout none: doctor needs a limit, so a hung all-reduce cannot hang it");
  request.timeout = std::chrono::ceil<std::chrono::milliseconds>(*limit);
  request.warmup = o.warmup;
  request.iters = o.iters;
  if (o.expect_busbw > 0) request.expect_busbw = o.expect_busbw;
  request.environment = env::current_environment();
  request.run_dir = o.report_dir;

  auto discovery = launcher::discover_gpus(request.environment);
  if (discovery.source == "fake") launcher::diagnostic("sgpu: note: {}\n", discovery.note);
  if (discovery.source == "none") return unavailable(o, discovery.note);
  int visible = 0;
  for (const auto& g : discovery.gpus) visible += g.visible ? 1 : 0;
  if (visible == 0)
    return unavailable(
        o, discovery.gpus.empty() ? "no GPU: the driver lists none" : "no GPU: CUDA_VISIBLE_DEVICES hides every GPU");
  int count = o.gpus;
  if (count == 0) {
    for (const auto& g : discovery.gpus)
      count += g.visible && (o.gpu_type.empty() || env::gpu_type_matches(o.gpu_type, g)) ? 1 : 0;
    count = std::max(count, 1);
  }
  request.gpus = env::select_gpus(discovery.gpus, count, o.gpu_type);
  return print(o, pf::run_preflight(request));
}

}  // namespace

Command add_doctor_command(CLI::App& app) {
  auto o = std::make_shared<DoctorOptions>();
  auto* cmd = app.add_subcommand(
      "doctor",
      "Check this node's GPUs: NVML health, topology, and an NCCL all-reduce across them (exit 0 healthy, "
      "1 a check failed, 3 nothing to check: no driver, NCCL or GPU); on many nodes, through any backend: sgpu "
      "launch --preflight-only");
  cmd->add_option("--gpus", o->gpus, "GPUs to check (default: every visible GPU)")->check(at_least(1));
  cmd->add_option("--gpu-type", o->gpu_type, "only GPUs of this type (h100, a100, ...)");
  cmd->add_option("-o,--output", o->format, "text (default) or json (one document)")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--timeout", o->timeout, "limit for the all-reduce, setup included (default 3m)");
  cmd->add_option("--min-bytes", o->min_bytes, "smallest all-reduce (default 8)");
  cmd->add_option("--max-bytes", o->max_bytes, "largest all-reduce (default 1G); busbw is judged at it");
  cmd->add_option("--step-factor", o->step_factor, "each size is this many times the last (default 2)");
  cmd->add_option("--warmup", o->warmup, "untimed all-reduces per size (default 5)")->check(at_least(0));
  cmd->add_option("--iters", o->iters, "timed all-reduces per size (default 20)")->check(at_least(1));
  cmd->add_option("--expect-busbw", o->expect_busbw, "expected bus bandwidth in GB/s, instead of the GPU type's")
      ->check(above_zero());
  cmd->add_option("--report-dir", o->report_dir,
                  "keep the report (preflight.json) and the workers' stderr (preflight/) in this directory");
  // The per-GPU worker sgpu starts itself.
  cmd->add_flag("--worker", o->worker)->group("");
  cmd->add_option("--rank", o->rank)->group("");
  cmd->add_option("--nranks", o->nranks)->group("");
  cmd->add_option("--device", o->device)->group("");
  cmd->add_option("--sizes", o->sizes)->group("");
  return [o](const DashTail&) { return run_doctor(*o); };
}

}  // namespace sgpu::app
