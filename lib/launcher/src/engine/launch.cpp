// The launch engine (launch.hpp): the same steps for every backend.
#include "sgpu/launcher/launch.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "engine/detach.hpp"
#include "engine/keyed_launch.hpp"
#include "engine/launch_preflight.hpp"
#include "engine/start_watch.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/backend.hpp"
#include "sgpu/launcher/devices/topology.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/outputs/outputs.hpp"
#include "sgpu/launcher/outputs/summary.hpp"
#include "sgpu/launcher/plan/dry_run.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/preflight/preflight.hpp"
#include "sgpu/launcher/runs/control_socket.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"
#include "sgpu/launcher/tracking/mlflow.hpp"

namespace sgpu::launcher {
namespace {

// Tells `ended` once every rank of an attempt has exited or the job tears
// down (MLflow: the params not sent yet then wait for the end, not holding
// the loop). One more observer beside the logs and the console.
class RanksEnded final : public JobObserver {
 public:
  RanksEnded(std::size_t ranks, std::function<void()> ended) : ranks_(ranks), ended_(std::move(ended)) {}
  void on_rank_exited(int, const env::ExitStatus&, bool) override {
    if (++exited_ >= ranks_) ended_();
  }
  void on_teardown(const env::JobEnd&) override { ended_(); }
  void on_attempt_started(int) override { exited_ = 0; }

 private:
  std::size_t ranks_;
  std::size_t exited_ = 0;
  std::function<void()> ended_;
};

// A run that could not start still answers as any run does: summary.json
// where a run directory was made, and the summary on stdout with -o json.
// summary.json of a run whose ranks never started.
nlohmann::json record_not_started(const LaunchContext& ctx, const std::string& reason, int code,
                                  const std::optional<TrackingLink>& mlflow = std::nullopt) {
  env::JobEnd end;
  end.kind = env::JobEnd::Kind::NotStarted;
  end.reason = reason;
  end.cause_code = code;
  auto doc = not_started_json(ctx.run_id, ctx.run_dir, end, mlflow);
  if (!ctx.spec.name.empty()) doc["name"] = ctx.spec.name;
  if (!ctx.run_dir.empty()) {
    try {
      write_file_atomic((std::filesystem::path(ctx.run_dir) / "summary.json").string(), dump_json(doc));
    } catch (const Error&) {  // the error being reported is the one that matters
    }
  }
  return doc;
}

void report_not_started(const LaunchContext& ctx, const Error& error, const std::optional<TrackingLink>& mlflow) {
  auto doc = record_not_started(ctx, error.what(), error.exit_code(), mlflow);
  if (ctx.spec.output_format != "json") return;
  output(dump_json(doc));
}

// -o json on a node whose ranks ran for a run another node hosts: the
// launcher's verdict; the run's summary is the hosting node's.
nlohmann::ordered_json node_part_json(const AgentResult& result, int code) {
  return {{"exit_code", code}, {"message", result.message}, {"summary", "on node 0, which hosts the run"}};
}

// What the spec asks of the backend that it cannot do: a usage error (2).
void check_capabilities(const JobSpec& spec, const BackendInfo& info) {
  if (spec.detach && !info.can.detaches) {
    std::string those;
    for (const auto& b : backends())
      if (b.can.detaches) those += fmt::format("{}--backend {}", those.empty() ? "" : ", ", b.flag_name);
    throw Error(fmt::format("{}: a detached run is available on one node ({}) for now, not on the {} backend; "
                            "run it attached (under nohup or tmux to outlive the terminal)",
                            where_set(spec, "output.detach", "--detach"), those, info.name),
                kExitUsage);
  }
}

// A question from another sgpu command to this running run.
void answer_control(const StacksTaker& take_stacks, const nlohmann::json& request,
                    std::function<void(nlohmann::json)> reply) {
  auto op = request.is_object() ? request.value("op", std::string()) : std::string();
  if (op != "stacks") return reply({{"ok", false}, {"error", fmt::format("unknown request '{}'; valid: stacks", op)}});
  bool native = request.value("native", false);
  take_stacks(native, [reply = std::move(reply)](const Inspection& in) {
    reply({{"ok", true},
           {"text", format_inspection("", in)},
           {"dir", in.dir},
           {"seconds", in.seconds},
           {"stacks", stacks_json(in.report, in.stacks)}});
  });
}

LaunchContext context_of(LaunchRequest& request) {
  LaunchContext ctx;
  ctx.spec = std::move(request.resolved.spec);
  ctx.inherited = std::move(request.inherited);
  ctx.cwd = std::move(request.cwd);
  ctx.self_exe = std::move(request.self_exe);
  if (ctx.spec.preflight.only) ctx.spec.preflight.enabled = true;
  return ctx;
}

}  // namespace

int launch(LaunchRequest request) {
  // First, so it is destroyed last: outputs and the backend hold objects on it.
  boost::asio::io_context io(1);
  auto ctx = context_of(request);
  ctx.io = &io;
  const auto& info = choose_backend(ctx.spec, ctx.inherited);
  auto backend = info.make();
  check_capabilities(ctx.spec, info);
  if (ctx.spec.detach) {
    // The caller prints the run id and returns; the run goes on in a new session.
    ctx.run_dir_made = [](const LaunchContext& c) {
      detach_run(c.run_id, c.run_dir, c.spec.output_format == "json", c.spec.name);
    };
  }
  std::signal(SIGPIPE, SIG_IGN);
  // MLflow: the run is created just before the ranks start, every rank gets
  // its variables, and it is ended (status, metrics, artifacts) after the
  // summary; each step bounded by mlflow.timeout, a failing server only warned about.
  std::vector<std::string> tracking_warnings;
  auto tracking = mlflow_config(ctx.spec, ctx.inherited, tracking_warnings);  // a bad --mlflow is 2
  for (const auto& w : tracking_warnings) diagnostic("sgpu: warning: {}\n", w);
  std::optional<MlflowTracker> tracker;
  std::optional<TrackedRun> tracked;
  // Just before the ranks start, in order: the preflight (a launch that fails
  // it makes no MLflow run), then MLflow's run, whose variables every rank
  // gets. The run is asked for at once and awaited only by the ranks: the
  // server works on it while the outputs and the supervisor are made ready.
  if (tracking) tracker.emplace(io, std::move(*tracking));  // runs the loop only while its calls are in flight
  // --idempotency-key: held from the key's lookup until the new run's
  // state.json (written as the outputs are made) records the key.
  std::optional<KeyLock> key_lock;
  std::unique_ptr<JobOutputs> outputs;
  std::optional<RanksEnded> ranks_ended;  // the observer when tracked
  // `sgpu stacks` reaches the run here while its job runs: open once both
  // the run directory (the outputs) and the backend's way to take stacks exist.
  std::optional<ControlSocket> control;
  StacksTaker stacks_taker;
  std::string control_dir;
  auto open_control = [&] {
    if (control || !stacks_taker || control_dir.empty()) return;
    control.emplace(io, control_dir, [&](const nlohmann::json& asked, auto reply) {
      if (!stacks_taker) return reply(nlohmann::json{{"ok", false}, {"error", "the run's job is over"}});
      answer_control(stacks_taker, asked, std::move(reply));
    });
  };
  ctx.offer_stacks = [&](StacksTaker taker) {
    stacks_taker = std::move(taker);
    if (stacks_taker)
      open_control();
    else
      control.reset();  // on the loop: nothing keeps it running once the job is over
  };
  // The run's link and spec.json's upload, once both the run and the
  // outputs exist (on one node the outputs come first, on many the run).
  auto track_outputs = [&](const LaunchPlan& plan) {
    if (!tracked || !outputs) return;
    outputs->set_tracking({tracked->run_id, tracked->url}, tracked->env);
    // spec.json is final now: it goes beside the job, not at its end.
    tracker->upload_now((std::filesystem::path(plan.run_dir) / "spec.json").string(), "spec.json");
    outputs->add_observer(ranks_ended.emplace(plan.ranks.size(), [&] { tracker->ranks_ended(); }));
  };
  std::optional<LaunchPlan> job_plan;
  // While MLflow's run is created, until the ranks start, signals and the
  // run's deadline are in force (start_watch.hpp); JobControl then takes
  // over. Not yet during the preflight: with the watch's signal set on the
  // loop, the preflight's workers were never seen to end (a hang, not
  // understood yet), and the preflight bounds itself.
  std::optional<StartWatch> start_watch;
  auto launched = std::chrono::steady_clock::now();
  if (ctx.spec.preflight.enabled || tracker) {
    ctx.before_start = [&](LaunchContext& c, const LaunchPlan& plan) {
      // The local backend's GPUs are this node's: checked here. A multi-node
      // backend's nodes check theirs between the rendezvous's Assign and
      // Start, and the ClusterJob judges them all.
      if (c.spec.preflight.enabled && info.can.ranks_here) run_launch_preflight(c, plan);
      // A check alone (--preflight-only) is not a run to track.
      if (!tracker || c.spec.preflight.only) return;
      if (!start_watch) {
        auto left = plan.timeout;
        if (left) *left -= std::chrono::duration_cast<env::Seconds>(std::chrono::steady_clock::now() - launched);
        start_watch.emplace(io, left, plan.timeout);
      }
      tracker->begin(describe_run(c.spec, plan, c.inherited));
    };
  }
  if (tracker) {
    ctx.ranks_env = [&](LaunchContext&) -> env::Environment {
      tracked = tracker->await_run([&] { return start_watch && start_watch->fired(); });
      if (start_watch) {
        start_watch->throw_if_fired("MLflow's run to be created");
        start_watch->stop();
      }
      if (job_plan) track_outputs(*job_plan);
      return tracked ? tracked->env : env::Environment{};
    };
  }
  // The console, logs and report are made once the ranks are placed.
  ObserverFactory observe = [&](boost::asio::io_context& loop, const LaunchPlan& plan) -> JobObserver& {
    check_output_options(ctx.spec, static_cast<int>(plan.ranks.size()));
    outputs = std::make_unique<JobOutputs>(loop, ctx.spec, plan, ctx.inherited);
    control_dir = plan.run_dir;
    open_control();
    key_lock.reset();
    job_plan = plan;
    track_outputs(plan);
    return outputs->observer();
  };
  BackendRun result;
  try {
    restart_policy(ctx.spec);  // checked before anything starts, on one node or many
    check_launch_preflight(ctx.spec, info);
    backend->check(ctx);
    if (auto answered = answer_from_keyed_run(ctx, request.force_new, key_lock)) {
      backend->release(*answered);  // a run with the key answered: nothing started
      return *answered;
    }
    result = backend->run(ctx, observe);
  } catch (const preflight::PreflightDone& done) {
    // --preflight-only: the check was the launch (sgpu doctor's report and codes).
    int code = preflight::preflight_exit_code(done.result);
    backend->release(code);
    record_not_started(ctx, preflight::preflight_headline(done.result), code);
    if (ctx.spec.output_format == "json")
      output(preflight::preflight_json(done.result).dump(2) + "\n");
    else
      output(preflight::preflight_text(done.result));
    return code;
  } catch (const Error& e) {
    backend->release(e.exit_code());
    // A run that the nodes never started (the rendezvous failed, a host
    // was unreachable) still ends its MLflow run, as FAILED with the code;
    // one asked for and not awaited yet is awaited first, so that the
    // summary links it too.
    if (tracker && !tracked && !(start_watch && start_watch->fired())) tracked = tracker->await_run();
    std::optional<TrackingLink> link;
    if (tracked) link = TrackingLink{tracked->run_id, tracked->url};
    if (outputs) outputs->not_started(e.exit_code());
    report_not_started(ctx, e, link);
    if (tracked) tracker->end(describe_not_started(e.exit_code()));
    throw;
  }
  if (!result.hosted) {  // this node's part of a run another node hosts
    backend->release(result.as_node.exit_code);
    int code = report_agent_result(result.as_node);
    if (ctx.spec.output_format == "json") output(dump_json(node_part_json(result.as_node, code)));
    return code;
  }
  auto& outcome = *result.hosted;
  // The one exit code: derived from the recorded end (which the backend
  // explained before any node heard the verdict), reported everywhere.
  int code = outputs ? outputs->finish(outcome) : outcome.exit_code();
  if (tracker && job_plan) tracker->end(describe_end(outcome, *job_plan));
  backend->release(code);
  return code;
}

int dry_run(LaunchRequest request) {
  auto ctx = context_of(request);
  try {
    const auto& info = choose_backend(ctx.spec, ctx.inherited);
    auto backend = info.make();
    check_capabilities(ctx.spec, info);
    restart_policy(ctx.spec);  // checked before anything starts, on one node or many
    check_launch_preflight(ctx.spec, info);
    backend->check(ctx);
    auto layout = backend->describe(ctx);
    request.resolved.spec = ctx.spec;
    DryRunInputs in;
    in.nodes = layout.nodes;
    in.master_addr = layout.master_addr;
    in.notes = layout.notes;
    in.backend = info.name;
    in.inherited = ctx.inherited;
    in.cwd = ctx.cwd;
    in.config = request.config;
    in.runs_root = std::filesystem::absolute(runs_root(ctx.spec.log_dir, ctx.inherited)).string();
    bool here = std::any_of(layout.nodes.begin(), layout.nodes.end(), [](const auto& n) { return n.gpus.has_value(); });
    if (here) {  // ranks run on this node: their program is looked up now, their binding made
      in.executable = resolve_program(ctx.spec, ctx.inherited, ctx.cwd);
      if (needs_topology(ctx.spec))
        in.topology = load_topology(ctx.inherited, where_set(ctx.spec, "resources.cpu_bind", "--cpu-bind"));
    } else {
      in.executable = program_name(ctx.spec);  // remote nodes resolve their own, at launch
    }
    auto plan = make_dry_run(request.resolved, in);
    output(ctx.spec.output_format == "json" ? dry_run_json(plan) : dry_run_text(plan));
    return 0;
  } catch (const Error& e) {
    throw Error(e.what(), kExitUsage);  // a dry run reports problems with 2, whatever they are
  }
}

}  // namespace sgpu::launcher
