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
#include "sgpu/launcher/job/network_report.hpp"
#include "sgpu/launcher/outputs/outputs.hpp"
#include "sgpu/launcher/outputs/summary.hpp"
#include "sgpu/launcher/plan/dry_run.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/preflight/preflight.hpp"
#include "sgpu/launcher/runs/control_socket.hpp"
#include "sgpu/launcher/runs/recycle.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"
#include "sgpu/launcher/tracking/mlflow.hpp"

namespace sgpu::launcher {
namespace {

// What MLflow's tracker hears of the job, one more observer beside the logs
// and the console: `ended` once every rank of an attempt has exited or the
// job tears down (the params not sent yet then wait for the end, not
// holding the loop), and each node's sample (--sample-every: system metrics).
class TrackerFeed final : public JobObserver {
 public:
  TrackerFeed(std::size_t ranks, std::function<void()> ended, std::function<void(const NodeSample&)> sampled)
      : ranks_(ranks), ended_(std::move(ended)), sampled_(std::move(sampled)) {}
  void on_sample(const NodeSample& sample) override { sampled_(sample); }
  void on_rank_exited(int, const env::ExitStatus&, bool) override {
    if (++exited_ >= ranks_) ended_();
  }
  void on_teardown(const env::JobEnd&) override { ended_(); }
  void on_attempt_started(int) override { exited_ = 0; }

 private:
  std::size_t ranks_;
  std::size_t exited_ = 0;
  std::function<void()> ended_;
  std::function<void(const NodeSample&)> sampled_;
};

// A run that could not start still answers as any run does: summary.json
// where a run directory was made, and the summary on stdout with -o json.
// summary.json of a run whose ranks never started.
nlohmann::json record_not_started(const LaunchContext& ctx, const RunStart& run, const std::string& reason, int code,
                                  const std::optional<TrackingLink>& mlflow = std::nullopt) {
  env::JobEnd end;
  end.kind = env::JobEnd::Kind::NotStarted;
  end.reason = reason;
  end.cause_code = code;
  auto doc = not_started_json(run.id, run.dir, end, mlflow);
  if (!ctx.spec.name.empty()) doc["name"] = ctx.spec.name;
  if (!run.dir.empty()) {
    try {
      write_run_file((std::filesystem::path(run.dir) / "summary.json").string(), dump_json(doc));
    } catch (const Error&) {  // the error being reported is the one that matters
    }
  }
  return doc;
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
  if (spec.spares > 0 && !info.can.spare_nodes) {
    std::string those;
    for (const auto& b : backends())
      if (b.can.spare_nodes) those += fmt::format("{}--backend {}", those.empty() ? "" : ", ", b.flag_name);
    throw Error(
        fmt::format("{}: spare nodes are held by {} for now, not by the {} backend{}",
                    where_set(spec, "resources.spares", fmt::format("--spares {}", spec.spares)), those, info.name,
                    info.can.ranks_here ? " (on one node, a GPU beyond the job's already takes a bad GPU's "
                                          "place before each attempt: --health-gate)"
                                        : ""),
        kExitUsage);
  }
  if (spec.spares > 0 && spec.max_restarts == 0)
    throw Error(fmt::format("{}: a spare takes a lost node's place in the next attempt, and this run makes none: add "
                            "--max-restarts N",
                            where_set(spec, "resources.spares", fmt::format("--spares {}", spec.spares))),
                kExitUsage);
  // The ranks run under this process, on this node: nothing crosses a network to explain.
  if (spec.rendezvous.explain_network && info.can.ranks_here)
    throw Error(
        "--explain-network: this job runs on one node, where the ranks meet over loopback (MASTER_ADDR "
        "127.0.0.1) and nothing crosses a network; it explains jobs of several nodes (--nnodes, --hosts, SLURM)",
        kExitUsage);
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

// One launch: the engine owns the run (its directory, the steps before the
// ranks start, the outputs, the exit code) and is the backend's JobHost.
class Engine final : public JobHost {
 public:
  explicit Engine(LaunchRequest& request)
      : ctx_(context_of(request)), info_(choose_backend(ctx_.spec, ctx_.inherited)), force_new_(request.force_new) {
    ctx_.io = &io_;
  }

  int launch();

  JobObserver& observe(boost::asio::io_context& loop, const LaunchPlan& plan) override {
    check_output_options(ctx_.spec, static_cast<int>(plan.ranks.size()));
    outputs_ = std::make_unique<JobOutputs>(loop, ctx_.spec, plan, ctx_.inherited);
    control_dir_ = plan.run_dir;
    open_control();
    key_lock_.reset();
    if (tracker_) job_plan_ = plan;  // MLflow's end reads it; a copy of every rank's environment otherwise unused
    track_outputs(plan);
    return outputs_->observer();
  }

  // What begin_tracking() asked for, awaited: the server worked on it while
  // the backend made its outputs and supervisor ready.
  env::Environment ranks_env() override {
    if (!tracker_ || ctx_.spec.preflight.only) return {};
    tracked_ = tracker_->await_run([&] { return start_watch_ && start_watch_->fired(); });
    if (start_watch_) {
      start_watch_->throw_if_fired("MLflow's run to be created");
      start_watch_->stop();
    }
    if (job_plan_) track_outputs(*job_plan_);
    return tracked_ ? tracked_->env : env::Environment{};
  }

  void offer_stacks(StacksTaker taker) override {
    stacks_taker_ = std::move(taker);
    if (stacks_taker_)
      open_control();
    else {
      control_.reset();  // on the loop: nothing keeps it running once the job is over
      if (outputs_) outputs_->job_over();
    }
  }

 private:
  BackendRun start();
  void make_run(const std::string& root, const RunStart& planned, const LaunchPlan& plan);
  void before_start(const LaunchPlan& plan);
  int preflight_only(const preflight::PreflightResult& result);
  int network_explained(const NetworkExplained& explained);
  void not_started(const Error& e);
  int finish(BackendRun& result);

  // `sgpu stacks` reaches the run here while its job runs: open once both
  // the run directory (the outputs) and the backend's way to take stacks exist.
  void open_control() {
    if (control_ || !stacks_taker_ || control_dir_.empty()) return;
    control_.emplace(io_, control_dir_, [&](const nlohmann::json& asked, auto reply) {
      if (!stacks_taker_) return reply(nlohmann::json{{"ok", false}, {"error", "the run's job is over"}});
      answer_control(stacks_taker_, asked, std::move(reply));
    });
  }

  // The run's link and spec.json's upload, once both the run and the
  // outputs exist (on one node the outputs come first, on many the run).
  void track_outputs(const LaunchPlan& plan) {
    if (!tracked_ || !outputs_) return;
    outputs_->set_tracking({tracked_->run_id, tracked_->url}, tracked_->env);
    // spec.json is final now: it goes beside the job, not at its end.
    tracker_->upload_now((std::filesystem::path(plan.run_dir) / "spec.json").string(), "spec.json");
    bool several_nodes = !plan.ranks.empty() && plan.ranks.front().place.nnodes > 1;
    outputs_->add_observer(tracker_feed_.emplace(
        plan.ranks.size(), [&] { tracker_->ranks_ended(); },
        [&, several_nodes](const NodeSample& sample) { tracker_->log_sample(sample, several_nodes); }));
  }

  // First, so it is destroyed last: outputs and the backend hold objects on it.
  boost::asio::io_context io_{1};
  LaunchContext ctx_;
  const BackendInfo& info_;
  std::unique_ptr<Backend> backend_ = info_.make();
  bool force_new_ = false;
  RunStart run_;  // empty until the run directory exists
  std::chrono::steady_clock::time_point launched_ = std::chrono::steady_clock::now();
  // MLflow: the run is asked for just before the ranks start (after the
  // preflight: a launch that fails it makes no MLflow run) and awaited only
  // by the ranks (ranks_env); every rank gets its variables, and it is ended
  // (status, metrics, artifacts) after the summary; each step bounded by
  // mlflow.timeout, a failing server only warned about.
  std::optional<MlflowTracker> tracker_;
  std::optional<TrackedRun> tracked_;
  // While MLflow's run is created, until the ranks start, signals and the
  // run's deadline are in force (start_watch.hpp); JobControl then takes
  // over. Not yet during the preflight: with the watch's signal set on the
  // loop, the preflight's workers were never seen to end (a hang, not
  // understood yet), and the preflight bounds itself.
  std::optional<StartWatch> start_watch_;
  // --idempotency-key: held from the key's lookup until the new run's
  // state.json (written as the outputs are made) records the key.
  std::optional<KeyLock> key_lock_;
  std::unique_ptr<JobOutputs> outputs_;
  std::optional<TrackerFeed> tracker_feed_;  // the observer when tracked
  std::optional<ControlSocket> control_;
  StacksTaker stacks_taker_;
  std::string control_dir_;
  std::optional<LaunchPlan> job_plan_;
};

// The run directory, once the backend's plan holds: a mistake in it leaves
// nothing behind. Then --detach (the caller prints the run id and returns;
// the run goes on in a new session) and the steps that come first.
void Engine::make_run(const std::string& root, const RunStart& planned, const LaunchPlan& plan) {
  int ranks = info_.can.ranks_here ? static_cast<int>(plan.ranks.size()) : 0;
  run_.dir = make_run_dir(root, planned.id, ranks);
  run_.id = planned.id;
  if (ctx_.spec.detach) detach_run(run_.id, run_.dir, ctx_.spec.output_format == "json", ctx_.spec.name);
  before_start(plan);
}

// Before anything starts, in order: the preflight of this node's GPUs when
// the ranks run here (a multi-node backend's nodes check theirs between the
// rendezvous's Assign and Start, and the ClusterJob judges them all), then
// MLflow's run, asked for now and awaited in ranks_env().
void Engine::before_start(const LaunchPlan& plan) {
  if (ctx_.spec.preflight.enabled && info_.can.ranks_here) run_launch_preflight(ctx_, run_.dir, plan);
  // A check alone (--preflight-only) is not a run to track.
  if (!tracker_ || ctx_.spec.preflight.only) return;
  auto left = plan.timeout;
  if (left) *left -= std::chrono::duration_cast<env::Seconds>(std::chrono::steady_clock::now() - launched_);
  start_watch_.emplace(io_, left, plan.timeout);
  tracker_->begin(describe_run(ctx_.spec, plan, ctx_.inherited));
}

BackendRun Engine::start() {
  auto root = runs_root(ctx_.spec.log_dir, ctx_.inherited);
  RunStart planned;
  planned.id = make_run_id();
  planned.dir = (std::filesystem::absolute(root) / planned.id).string();
  auto plan = backend_->prepare(ctx_, planned);
  if (plan) make_run(root, planned, *plan);
  return backend_->run(ctx_, run_, *this);
}

// --preflight-only: the check was the launch (sgpu doctor's report and codes).
int Engine::preflight_only(const preflight::PreflightResult& result) {
  int code = preflight::preflight_exit_code(result);
  backend_->release(code);
  record_not_started(ctx_, run_, preflight::preflight_headline(result), code);
  if (ctx_.spec.output_format == "json")
    output(preflight::preflight_json(result).dump(2) + "\n");
  else
    output(preflight::preflight_text(result));
  return code;
}

// --explain-network: the rendezvous and its check were the launch.
int Engine::network_explained(const NetworkExplained& explained) {
  backend_->release(0);
  env::Environment user = ctx_.inherited;
  for (const auto& [k, v] : ctx_.spec.env) user[k] = v;
  auto nodes = node_networks(explained, user);
  record_not_started(ctx_, run_, "every node reaches MASTER_ADDR; no rank was started (--explain-network)", 0);
  if (ctx_.spec.output_format == "json")
    output(dump_json(network_json(explained, nodes)));
  else
    output(network_text(explained, nodes));
  return 0;
}

// A run that the nodes never started (the rendezvous failed, a host was
// unreachable) still ends its MLflow run, as FAILED with the code; one asked
// for and not awaited yet is awaited first, so that the summary links it too.
void Engine::not_started(const Error& e) {
  backend_->release(e.exit_code());
  if (tracker_ && !tracked_ && !(start_watch_ && start_watch_->fired())) tracked_ = tracker_->await_run();
  std::optional<TrackingLink> link;
  if (tracked_) link = TrackingLink{tracked_->run_id, tracked_->url};
  if (outputs_) outputs_->not_started(e.exit_code());
  auto doc = record_not_started(ctx_, run_, e.what(), e.exit_code(), link);
  if (ctx_.spec.output_format == "json") output(dump_json(doc));
  if (tracked_) tracker_->end(describe_not_started(e.exit_code()));
}

int Engine::finish(BackendRun& result) {
  if (!result.hosted) {  // this node's part of a run another node hosts
    backend_->release(result.as_node.exit_code);
    int code = report_agent_result(result.as_node);
    if (ctx_.spec.output_format == "json") output(dump_json(node_part_json(result.as_node, code)));
    return code;
  }
  auto& outcome = *result.hosted;
  // The one exit code: derived from the recorded end (which the backend
  // explained before any node heard the verdict), reported everywhere.
  int code = outputs_ ? outputs_->finish(outcome) : outcome.exit_code();
  if (tracker_ && job_plan_) tracker_->end(describe_end(outcome, *job_plan_));
  backend_->release(code);
  return code;
}

int Engine::launch() {
  check_capabilities(ctx_.spec, info_);
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> tracking_warnings;
  auto tracking = mlflow_config(ctx_.spec, ctx_.inherited, tracking_warnings);  // a bad --mlflow is 2
  for (const auto& w : tracking_warnings) diagnostic("sgpu: warning: {}\n", w);
  if (tracking) tracker_.emplace(io_, std::move(*tracking));  // runs the loop only while its calls are in flight
  BackendRun result;
  try {
    restart_policy(ctx_.spec);  // checked before anything starts, on one node or many
    check_launch_preflight(ctx_.spec, info_);
    backend_->check(ctx_);
    if (auto answered = answer_from_keyed_run(ctx_, force_new_, key_lock_)) {
      backend_->release(*answered);  // a run with the key answered: nothing started
      return *answered;
    }
    result = start();
  } catch (const preflight::PreflightDone& done) {
    return preflight_only(done.result);
  } catch (const NetworkExplained& explained) {
    return network_explained(explained);
  } catch (const BackendAnswer& answer) {
    backend_->release(answer.exit_code);
    output(answer.text);
    return answer.exit_code;
  } catch (const Error& e) {
    not_started(e);
    throw;
  }
  return finish(result);
}

}  // namespace

int launch(LaunchRequest request) {
  Engine engine(request);
  return engine.launch();
}

int dry_run(LaunchRequest request) {
  auto ctx = context_of(request);
  ctx.dry_run = true;
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
    in.env_sync = layout.env_sync;
    in.spares = layout.spares;
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
  } catch (const BackendAnswer& answer) {
    output(answer.text);
    return answer.exit_code;
  } catch (const Error& e) {
    throw Error(e.what(), kExitUsage);  // a dry run reports problems with 2, whatever they are
  }
}

}  // namespace sgpu::launcher
