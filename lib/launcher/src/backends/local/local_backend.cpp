#include "backends/local/local_backend.hpp"
#include "sgpu/launcher/preflight/node_gate.hpp"

#include <unistd.h>
#include <algorithm>
#include <array>
#include <filesystem>
#include <memory>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "backends/host_filter.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/devices/devices.hpp"
#include "sgpu/launcher/devices/topology.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/metrics/sampler.hpp"
#include "sgpu/launcher/outputs/outputs.hpp"
#include "sgpu/launcher/plan/ray.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/process/open_files.hpp"
#include "sgpu/launcher/runs/run_state.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"
#include "sgpu/rendezvous/port_reservation.hpp"

namespace sgpu::launcher::local {
namespace {

// What the plan chose for the user, said once before the ranks start.
void say_plan_notes(const LaunchPlan& plan, int ranks) {
  if (plan.omp_defaulted && ranks > 1)
    diagnostic("{}", plan.cpu_bind == CpuBind::None
                         ? "sgpu: note: OMP_NUM_THREADS=1 for every rank, to avoid oversubscribing the CPUs; "
                           "set OMP_NUM_THREADS to tune it\n"
                         : "sgpu: note: OMP_NUM_THREADS is each rank's bound cores (--cpu-bind); set OMP_NUM_THREADS "
                           "to tune it\n");
  if (plan.report_bindings)
    for (const auto& r : plan.ranks) diagnostic("sgpu: {}\n", report_line(plan, r));
}

// --include/--exclude on the one node of a local run: a part names this
// host as "" (":3"), "localhost" or its hostname, and the GPUs it leaves out
// are made invisible to the plan, as CUDA_VISIBLE_DEVICES would. Returns
// what was left out, for messages ("" none). Another host is an error.
std::string apply_host_filters(const JobSpec& spec, std::vector<env::Gpu>& gpus) {
  if (spec.include.empty() && spec.exclude.empty()) return {};
  std::array<char, 256> name{};
  ::gethostname(name.data(), name.size() - 1);
  auto here = [&](const std::string& host) {
    return host.empty() || host == "localhost" || host == "127.0.0.1" || host == name.data();
  };
  std::string indexes;
  for (const auto& g : gpus) indexes += (indexes.empty() ? "" : ", ") + std::to_string(g.index);
  auto check = [&](const std::vector<HostFilter>& filters, std::string_view flag, const std::string& text) {
    for (const auto& f : filters) {
      if (!here(f.host))
        throw Error(
            fmt::format("{} {}: the local backend runs on this host ({}) alone; name its GPUs as ':0,1' or "
                        "'localhost:0,1', or give --backend ssh for other hosts",
                        flag, text, name.data()));
      for (int d : f.devices)
        if (std::none_of(gpus.begin(), gpus.end(), [&](const env::Gpu& g) { return g.index == d; }))
          throw Error(fmt::format("{} {}: this node has no GPU {} (it has {})", flag, text, d,
                                  gpus.empty() ? std::string("none") : indexes));
    }
  };
  auto include = spec.include.empty() ? std::vector<HostFilter>{} : parse_host_filter(spec.include, "--include");
  auto exclude = spec.exclude.empty() ? std::vector<HostFilter>{} : parse_host_filter(spec.exclude, "--exclude");
  check(include, "--include", spec.include);
  check(exclude, "--exclude", spec.exclude);
  auto named = [](const std::vector<HostFilter>& filters, int index) {
    return std::any_of(filters.begin(), filters.end(), [&](const HostFilter& f) {
      return f.devices.empty() || std::find(f.devices.begin(), f.devices.end(), index) != f.devices.end();
    });
  };
  std::string left_out;
  for (auto& g : gpus) {
    if (!g.visible) continue;
    bool out = (!include.empty() && !named(include, g.index)) || named(exclude, g.index);
    if (!out) continue;
    g.visible = false;
    left_out += (left_out.empty() ? "" : ", ") + std::to_string(g.index);
  }
  if (left_out.empty()) return {};
  if (std::none_of(gpus.begin(), gpus.end(), [](const env::Gpu& g) { return g.visible; }))
    throw Error(fmt::format("{}{}{}: they leave none of this node's GPUs ({})",
                            spec.include.empty() ? "" : "--include " + spec.include,
                            spec.include.empty() || spec.exclude.empty() ? "" : " ",
                            spec.exclude.empty() ? "" : "--exclude " + spec.exclude, left_out));
  auto why = !spec.exclude.empty() && !spec.include.empty() ? "--include/--exclude"
             : !spec.exclude.empty()                        ? "--exclude"
                                                            : "--include";
  return fmt::format("GPU{} {} left out by {}", left_out.find(',') == std::string::npos ? "" : "s", left_out, why);
}

class LocalBackend : public Backend {
 public:
  void check(LaunchContext& ctx) override {
    // N CPU ranks need nothing of the driver: it is not asked (loading and
    // starting NVML costs milliseconds without a GPU, tens with one).
    const auto& spec = ctx.spec;
    bool cpu_ranks = spec.nproc && spec.nproc_mode.empty() && !spec.gpus && !spec.gpus_per_node;
    if (!cpu_ranks) discover(ctx);
    if (cpu_ranks && (!spec.include.empty() || !spec.exclude.empty()))
      diagnostic("sgpu: note: --include/--exclude are not used: they choose GPUs, and --nproc {} runs CPU ranks\n",
                 *spec.nproc);
    naming_filters([&] {
      resolve_nproc_mode(ctx.spec, discovery_.gpus,
                         static_cast<int>(std::max(1U, std::thread::hardware_concurrency())));
      ranks_ = rank_count(ctx.spec, discovery_.gpus);  // validates before anything is created
      return 0;
    });
    check_open_files_limit(ranks_);
    read_topology(ctx);
  }

  PlannedLayout describe(const LaunchContext& ctx) override {
    discover(ctx);  // --dry-run shows the node's GPUs, whatever the ranks use
    std::vector<std::string> notes;
    if (!left_out_.empty()) notes.push_back(left_out_);
    return {{{"this node", discovery_.gpus}}, "", notes, std::nullopt};
  }

  // The whole plan is validated before the disk is touched.
  std::optional<LaunchPlan> prepare(const LaunchContext& ctx, const RunStart& run) override {
    const auto& spec = ctx.spec;
    check_output_options(spec, ranks_);
    in_.inventory = discovery_.gpus;
    in_.inherited = ctx.inherited;
    in_.cwd = ctx.cwd;
    in_.executable = resolve_program(spec, ctx.inherited, ctx.cwd);
    in_.run_id = run.id;
    in_.run_dir = run.dir;
    in_.topology = topology_;
    port_.emplace(spec.master_port.value_or(0));
    in_.master_port = port_->port();
    if (spec.ray) {
      in_.ray_token = ray_token(rendezvous::Secret::generate());
      for (int i = 0; i < 3; ++i) in_.ray_ports.push_back(ray_ports_.emplace_back(0).port());
    }
    plan_ = naming_filters([&] { return make_plan(spec, in_); });
    // --preflight reads the first start's GPUs itself (and runs an all-reduce on them).
    if (!spec.preflight.enabled)
      if (auto why = gate(spec, plan_, 0); !why.empty()) throw Error(why, 1);
    return plan_;
  }

  BackendRun run(LaunchContext& ctx, const RunStart& /*run*/, JobHost& host) override {
    say_plan_notes(plan_, ranks_);
    auto& io = *ctx.io;
    auto& observer = host.observe(io, plan_);
    observer_ = &observer;
    for (const auto& e : excluded_) observer.on_excluded(e);  // before the first start: said now
    // --sample-every: this node's ranks and GPUs, on the supervisor's loop, until the job is over.
    std::optional<metrics::Sampler> sampler;
    auto options = supervision(ctx, host);
    options.on_end = [&sampler, end = std::move(options.on_end)] {
      if (sampler) sampler->stop();
      end();
    };
    Supervisor supervisor(io, observer, std::move(options));
    if (auto every = ctx.spec.sample_every.limit())
      sampler.emplace(
          io, metrics::SamplerOptions{*every, 0, "", metrics::sampled_gpus(plan_)},
          [&supervisor] { return supervisor.running_ranks(); },
          [&observer](const NodeSample& sample) { observer.on_sample(sample); });
    if (sampler) sampler->start();
    // What the engine asked for (MLflow's run) went on beside the outputs and
    // the supervisor being made ready; the ranks wait for it, and only they.
    for (const auto& [name, value] : host.ranks_env()) {
      ctx.spec.env[name] = value;  // later attempts' plans too
      for (auto& r : plan_.ranks) r.env[name] = value;
    }
    offer_stacks(ctx, host, supervisor);
    auto outcome = supervisor.run(rank_launches(plan_));
    outcome.excluded = excluded_;
    return {std::move(outcome), {}};
  }

 private:
  // The plan's limits and signals for the ranks' JobControl; a hung or
  // timed-out job's stacks; each restart's fresh plan.
  SupervisorOptions supervision(LaunchContext& ctx, JobHost& host) {
    const auto& plan = plan_;
    SupervisorOptions options;
    auto& control = options.control;
    control.timeout = plan.timeout;
    control.grace = plan.grace;
    control.hang_timeout = plan.hang_timeout;
    control.stop_signal = plan.stop_signal;
    control.signal_before = plan.signal_before;
    control.cancel_marker = (std::filesystem::path(plan.run_dir) / kRunCancelFile).string();
    control.max_restarts = plan.max_restarts;
    control.restart_backoff = plan.restart_backoff;
    // Where py-spy is looked for is worked out when stacks are wanted (a hang,
    // the timeout, `sgpu stacks`), not at every launch: the lookup copies
    // sgpu's whole environment. `ctx` outlives the run.
    options.inspect = [&io = *ctx.io, run_dir = plan.run_dir, program = plan.executable, &inherited = ctx.inherited](
                          const env::JobEnd& why, std::vector<RunningRank> running,
                          std::function<void(std::string)> done) {
      std::vector<StackTarget> targets;
      for (const auto& r : running) targets.push_back({r.rank, r.pid, ""});
      inspect_ranks(io, run_dir, why.reason.empty() ? env::describe_end(why) : why.reason, targets,
                    stack_options_for(program, inherited),
                    [done = std::move(done)](const Inspection& seen) { done(seen.report.verdict); });
    };
    if (plan.max_restarts > 0) {
      // Each attempt gets its own MASTER_PORT (the new one is reserved
      // before the old is let go, so they differ) unless --master-port fixed it.
      // A GPU the health gate fails is left out and a spare takes its place;
      // with none left, no attempt starts and the run ends with the last one's end.
      options.relaunch = [this, &spec = ctx.spec](int attempt) -> std::vector<RankLaunch> {
        if (!spec.master_port) *port_ = rendezvous::PortReservation(0);
        in_.master_port = port_->port();
        in_.restart_count = attempt;
        auto next = make_plan(spec, in_);
        if (auto why = gate(spec, next, attempt); !why.empty()) {
          diagnostic("sgpu: error: attempt {} cannot start: {}\n", attempt, why);
          return {};
        }
        return rank_launches(next);
      };
    }
    options.on_end = [&host] { host.offer_stacks(nullptr); };
    return options;
  }

  // --health-gate: the plan's GPUs read through NVML before `attempt`, and
  // the XIDs the node's GPUs reported during the attempt before
  // (preflight::NodeGate). One that fails is left out for the rest of the run
  // and a GPU of this node beyond the job's takes its place. "" when the plan
  // is healthy; else why no healthy plan is left.
  std::string gate(const JobSpec& spec, LaunchPlan& plan, int attempt) {
    if (!spec.health_gate) return "";
    auto result = gate_.check(plan, attempt, spec.max_restarts > 0, in_.inventory, [&] {
      for (auto& g : in_.inventory)
        if (gate_.left_out().contains(g.index)) g.visible = false;
      return naming_filters([&] { return make_plan(spec, in_); });
    });
    if (!result.unread.empty())
      diagnostic("sgpu: note: the health gate could not read the GPUs' health ({}): they were not checked\n",
                 result.unread);
    for (const auto& f : result.excluded) {
      Exclusion e{"", f.gpu, f.reason, attempt};
      excluded_.push_back(e);
      if (observer_ != nullptr) observer_->on_excluded(e);
    }
    return result.refusal;
  }

  // `sgpu stacks` on the running job: the supervisor's live ranks.
  void offer_stacks(const LaunchContext& ctx, JobHost& host, Supervisor& supervisor) {
    host.offer_stacks([&io = *ctx.io, &supervisor, run_dir = plan_.run_dir, program = plan_.executable,
                       &inherited = ctx.inherited](bool native, std::function<void(const Inspection&)> done) {
      std::vector<StackTarget> targets;
      for (const auto& r : supervisor.running_ranks()) targets.push_back({r.rank, r.pid, ""});
      auto stacks = stack_options_for(program, inherited);
      stacks.native = native;
      inspect_ranks(io, run_dir, "", targets, stacks, std::move(done));
    });
  }

  void discover(const LaunchContext& ctx) {
    if (discovered_) return;
    discovery_ = discover_gpus(ctx.inherited);
    discovered_ = true;
    left_out_ = apply_host_filters(ctx.spec, discovery_.gpus);
  }

  // A plan's error ("only 3 visible H100 GPUs") says which GPUs the filters left out.
  template <class F>
  auto naming_filters(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error& e) {
      if (left_out_.empty()) throw;
      throw Error(fmt::format("{}; {}", e.what(), left_out_), e.exit_code());
    }
  }

  // --cpu-bind, --report-bindings: read before anything starts, so a
  // topology hwloc cannot read is an error then.
  void read_topology(const LaunchContext& ctx) {
    if (topology_ || !needs_topology(ctx.spec)) return;
    topology_ = load_topology(ctx.inherited, where_set(ctx.spec, "resources.cpu_bind", "--cpu-bind"));
  }

  Discovery discovery_;
  std::string left_out_;  // "GPU 3 left out by --exclude :3", for messages; "" none
  std::optional<Topology> topology_;
  PlanInputs in_;
  std::optional<rendezvous::PortReservation> port_;     // MASTER_PORT, held until the ranks bind it
  std::vector<rendezvous::PortReservation> ray_ports_;  // --ray: the head's agents' ports, for the run
  LaunchPlan plan_;
  bool discovered_ = false;
  JobObserver* observer_ = nullptr;  // once the ranks are placed
  std::vector<Exclusion> excluded_;  // --health-gate: left out for the rest of the run
  preflight::NodeGate gate_;
  int ranks_ = 0;
};

}  // namespace

BackendInfo info() {
  return {.name = "local",
          .flag_name = "local",
          .can = {.ranks_here = true, .detaches = true},
          .offer = [](const JobSpec&, const env::Environment&) { return 1; },
          .make = []() -> std::unique_ptr<Backend> { return std::make_unique<LocalBackend>(); }};
}

}  // namespace sgpu::launcher::local
