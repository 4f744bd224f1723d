#include "backends/local/local_backend.hpp"

#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "sgpu/launcher/devices/devices.hpp"
#include "sgpu/launcher/outputs/outputs.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/rendezvous/port_reservation.hpp"

namespace sgpu::launcher::local {
namespace {

class LocalBackend : public Backend {
 public:
  void check(LaunchContext& ctx) override {
    discovery_ = discover_gpus(ctx.inherited);
    resolve_nproc_mode(ctx.spec, discovery_.gpus, static_cast<int>(std::max(1U, std::thread::hardware_concurrency())));
    ranks_ = rank_count(ctx.spec, discovery_.gpus);  // validates before anything is created
  }

  PlannedLayout describe(const LaunchContext&) override { return {{{"this node", discovery_.gpus}}, "", {}}; }

  BackendRun run(LaunchContext& ctx, const ObserverFactory& observe) override {
    const auto& spec = ctx.spec;
    check_output_options(spec, ranks_);
    PlanInputs in;
    in.inventory = discovery_.gpus;
    in.inherited = ctx.inherited;
    in.cwd = ctx.cwd;
    in.executable = resolve_program(spec, ctx.inherited, ctx.cwd);
    in.run_id = make_run_id();
    rendezvous::PortReservation port(spec.master_port.value_or(0));
    in.master_port = port.port();
    std::string root = spec.log_dir.empty() ? default_runs_root(ctx.inherited) : spec.log_dir;
    // The whole plan is validated before the disk is touched.
    in.run_dir = (std::filesystem::absolute(root) / in.run_id).string();
    auto plan = make_plan(spec, in);
    ctx.run_dir = create_run_dir(root, in.run_id, ranks_);
    ctx.run_id = in.run_id;
    if (ctx.run_dir_made) ctx.run_dir_made(ctx);
    if (plan.omp_defaulted && ranks_ > 1)
      fmt::print(stderr,
                 "sgpu: note: OMP_NUM_THREADS=1 for every rank, to avoid oversubscribing the CPUs; "
                 "set OMP_NUM_THREADS to tune it\n");
    std::vector<RankLaunch> launches;
    for (const auto& r : plan.ranks) launches.push_back({r.place.rank, plan.executable, plan.argv, r.env, plan.cwd});
    boost::asio::io_context io(1);
    auto& observer = observe(io, plan);
    Supervisor supervisor(io, observer, {plan.timeout, plan.grace});
    return {supervisor.run(launches), {}};
  }

 private:
  Discovery discovery_;
  int ranks_ = 0;
};

}  // namespace

BackendInfo info() {
  return {.name = "local",
          .flag_name = "local",
          .offer = [](const JobSpec&, const env::Environment&) { return 1; },
          .make = []() -> std::unique_ptr<Backend> { return std::make_unique<LocalBackend>(); }};
}

}  // namespace sgpu::launcher::local
