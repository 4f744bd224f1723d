#include "backends/slurm/slurm_launch.hpp"

#include <algorithm>
#include <csignal>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <utility>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "backends/slurm/hostlist.hpp"
#include "backends/slurm/slurm_allocation.hpp"
#include "backends/slurm/slurm_keys.hpp"
#include "backends/slurm/slurm_step.hpp"
#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/env/exit_code.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/rendezvous/endpoint.hpp"
#include "sgpu/rendezvous/host_info.hpp"

namespace sgpu::launcher {
namespace asio = boost::asio;

namespace {

// How often the pending job's state line is refreshed: a display, not a wait
// (salloc says when the job starts).
constexpr auto kStateEvery = std::chrono::seconds(2);
// After the run is over, how long srun may take to end by itself before it is
// told to (SIGTERM), and then made to (SIGKILL).
constexpr auto kStepEndWait = std::chrono::seconds(5);
// How long sgpu waits for salloc to hand the allocation back.
constexpr auto kReleaseWait = std::chrono::seconds(30);

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : std::string(sep)) + p;
  return out;
}

struct SlurmRun {
  asio::io_context& io;
  const SlurmLaunch& in;
  SlurmPlan plan;
  std::function<void(const std::string&)> notice;

  std::string job_id;
  std::vector<std::string> nodes;  // by node rank
  std::optional<int> cpus_per_task;
  std::unique_ptr<SallocHold> hold;
  std::optional<SallocEnd> salloc_end;
  asio::steady_timer timer;
  std::string last_state;
  bool nodes_known = false;
  std::optional<Error> wait_error;

  ClusterJob* job = nullptr;
  // steps[0]: the job's agents, one task per node; then one per spare that
  // took a lost node's place (--spares). step_of[k]: the step running node k.
  std::vector<std::unique_ptr<AgentStepProcess>> steps;
  std::vector<std::size_t> step_of;
  static constexpr std::size_t kNoStep = static_cast<std::size_t>(-1);
  std::deque<std::string> spares;  // --spares: the allocation's nodes held for a lost one
  // Submit mode, no spare left: a one-node allocation of its own for each
  // lost node (its job id, its salloc), asked for as the node is lost.
  struct Replacement {
    int node_rank = 0;
    std::string lost;
    std::unique_ptr<SallocHold> hold;
  };
  std::vector<Replacement> replacements;
  std::vector<std::string> lost_nodes;  // every lost node: no replacement allocation may land there
  std::ofstream log;
  std::vector<std::string> step_errors;
  std::string slurm_said;
  bool time_limit = false;
  bool preempted = false;          // SLURM preempted or cancelled the job (not its time limit, not a node)
  bool scheduler_stopped = false;  // SLURM ended the job: time limit, scancel, preemption
  bool aborted = false;            // srun said SLURM aborted the step
  bool run_over = false;
  bool replacement_refused = false;  // a replacement allocation failed: no other is asked for

  SlurmRun(asio::io_context& io_, const SlurmLaunch& launch, SlurmPlan p)
      : io(io_), in(launch), plan(std::move(p)), notice(launch.notice), timer(io_) {
    if (!notice) notice = [](const std::string& text) { diagnostic("sgpu: {}\n", text); };
  }

  // --- a new allocation ---

  void request_allocation() {
    SallocHold::Events ev;
    ev.pending = [this](const std::string& id) {
      job_id = id;
      notice(fmt::format("SLURM job {} is pending", id));
      show_state();
    };
    ev.granted = [this](const std::string& id) {
      job_id = id;
      timer.cancel();
      learn_nodes();
    };
    ev.ended = [this](const SallocEnd& e) { on_salloc_end(e); };
    ev.line = [this](const std::string& line) { write_log(line); };
    hold = std::make_unique<SallocHold>(io, slurm::salloc_argv(plan.request), in.inherited, in.cwd, std::move(ev));
  }

  void show_state() {
    timer.expires_after(kStateEvery);
    timer.async_wait([this](boost::system::error_code ec) {
      if (ec || hold->granted() || hold->ended()) return;
      run_slurm_command(io, {"squeue", "-h", "-t", "all", "-j", job_id, "-o", std::string(slurm::kSqueueFormat)},
                        in.inherited, [this](const std::string& out, int) {
                          if (hold->granted() || hold->ended()) return;
                          if (auto s = slurm::parse_squeue_line(out)) {
                            auto text = fmt::format("{} ({})", s->state, s->reason);
                            if (text != last_state) notice(fmt::format("SLURM job {}: {}", job_id, text));
                            last_state = text;
                          }
                          show_state();
                        });
    });
  }

  void learn_nodes() {
    run_slurm_command(io, {"squeue", "-h", "-j", job_id, "-o", "%N"}, in.inherited,
                      [this](const std::string& out, int status) {
                        auto list = out.substr(0, out.find('\n'));
                        if (status != 0 || list.empty()) {
                          wait_error = Error(fmt::format("SLURM job {} started, but squeue did not say on which "
                                                         "nodes",
                                                         job_id),
                                             1);
                          return;
                        }
                        nodes = slurm::expand_hostlist(list, "squeue's node list");
                        // --spares: the allocation's last nodes are held, not run on.
                        auto job_nodes = static_cast<std::size_t>(plan.nnodes);
                        if (nodes.size() > job_nodes) {
                          spares.assign(nodes.begin() + static_cast<std::ptrdiff_t>(job_nodes), nodes.end());
                          nodes.resize(job_nodes);
                        }
                        nodes_known = true;
                        notice(fmt::format("SLURM job {} is running on {}", job_id, list));
                      });
  }

  void on_salloc_end(const SallocEnd& e) {
    salloc_end = e;
    timer.cancel();
    using K = SallocEnd::Kind;
    auto errors = e.errors.empty() ? e.last_line : join(e.errors, "; ");
    if (!hold->granted() || !nodes_known) {
      if (!wait_error)
        wait_error = Error(e.kind == K::Cancelled ? fmt::format("SLURM job {} was cancelled before it started", job_id)
                                                  : fmt::format("SLURM did not grant the allocation: {}", errors),
                           1);
      return;
    }
    if (e.kind == K::TimeLimit) {
      time_limit = true;
      say(fmt::format("SLURM's time limit ended job {}", job_id));
    } else if (e.kind != K::Released) {
      preempted = true;
      say(fmt::format("SLURM job {} was cancelled (scancel or its allocation revoked)", job_id));
    }
  }

  // Runs the loop until the allocation is ready, refused or given up.
  void wait_for_allocation() {
    asio::signal_set signals(io, SIGINT, SIGTERM, SIGHUP);
    std::optional<int> interrupted;
    signals.async_wait([&](boost::system::error_code ec, int sig) {
      if (ec) return;
      interrupted = sig;
      hold->cancel();  // salloc withdraws the request; its end ends the wait
    });
    while (!nodes_known && !wait_error && !salloc_end) io.run_one();
    signals.cancel();
    if (interrupted) {
      while (!salloc_end) io.run_one();
      throw Error(fmt::format("interrupted by {} while waiting for SLURM job {}; the request was withdrawn",
                              env::signal_name(*interrupted), job_id.empty() ? "(not yet submitted)" : job_id),
                  128 + *interrupted);
    }
    if (wait_error) {
      release(1);
      throw *wait_error;
    }
    cpus_per_task = plan.request.cpus_per_node;
  }

  void release(int exit_code) {
    if (!hold) return;
    for (auto& r : replacements) {
      if (!r.hold || r.hold->ended()) continue;
      if (r.hold->granted())
        r.hold->release(exit_code);
      else
        r.hold->cancel();
    }
    hold->release(exit_code);
    timer.expires_after(kReleaseWait);
    bool late = false;
    timer.async_wait([&](boost::system::error_code ec) { late = !ec; });
    auto all_ended = [this] {
      return hold->ended() && std::all_of(replacements.begin(), replacements.end(),
                                          [](const Replacement& r) { return !r.hold || r.hold->ended(); });
    };
    while (!all_ended() && !late) io.run_one();
    timer.cancel();
    if (late) notice(fmt::format("salloc has not released SLURM job {} yet; scancel {} if it stays", job_id, job_id));
    io.restart();
  }

  // The allocation's end as SLURM has it (squeue's EndTime), for
  // --signal-before: asked once, before the job goes to the nodes.
  std::optional<Clock::time_point> allocation_end() {
    std::optional<Clock::time_point> end;
    bool answered = false;
    run_slurm_command(io, {"squeue", "-h", "-j", job_id, "-o", "%e"}, in.inherited,
                      [&](const std::string& out, int status) {
                        answered = true;
                        if (status == 0) end = slurm::parse_slurm_time(out.substr(0, out.find('\n')));
                      });
    while (!answered) io.run_one();
    io.restart();
    if (!end)
      notice(fmt::format("note: squeue did not say when SLURM job {} ends; --signal-before counts from --timeout",
                         job_id));
    return end;
  }

  // --- the step ---

  int node_rank(const std::string& name) const {
    if (name.empty()) return -1;  // a node rank waiting for its replacement's node is ""
    auto it = std::find(nodes.begin(), nodes.end(), name);
    return it == nodes.end() ? -1 : static_cast<int>(it - nodes.begin());
  }

  // What SLURM did, said at once; the first is kept as the end's cause.
  // `stopped`: SLURM ended the job (not a node failure, which is a lost node).
  void say(const std::string& text, bool stopped = true) {
    if (slurm_said.empty()) {
      slurm_said = text;
      scheduler_stopped = stopped;
    }
    notice(text);
  }

  // <run dir>/slurm.log: every line salloc and srun wrote, from the start
  // (the engine made the run directory before the backend asks SLURM).
  void open_log(const std::string& run_dir) { log.open(run_dir + "/slurm.log", std::ios::app); }
  void write_log(const std::string& line) {
    if (log.is_open()) log << line << '\n' << std::flush;
  }

  void start_step(ClusterJob& cluster) {
    job = &cluster;
    std::vector<std::string> agent = {in.self_exe,
                                      "agent",
                                      "--rdzv",
                                      rendezvous::Endpoint{rendezvous::local_hostname(), cluster.port()}.str(),
                                      "--slurm-step",
                                      "--join-timeout",
                                      env::format_duration(in.join_timeout)};
    slurm::AgentStep s{job_id, nodes, cpus_per_task, {}};
    auto argv = slurm::agent_srun_argv(s, agent);
    auto environment = slurm::agent_srun_environment(in.inherited);
    for (const auto& [k, v] : cluster.agent_environment()) environment[k] = v;
    write_log("sgpu: " + env::shell_join(argv));
    step_of.assign(nodes.size(), 0);
    add_step(argv, environment);
  }

  void add_step(const std::vector<std::string>& argv, const env::Environment& environment) {
    auto index = steps.size();
    AgentStepProcess::Events ev;
    ev.line = [this](const slurm::SrunLine& parsed, const std::string& line) { on_step_line(parsed, line); };
    ev.exited = [this, index](int status) { on_step_exit(index, status); };
    steps.push_back(std::make_unique<AgentStepProcess>(io, argv, environment, in.cwd, std::move(ev)));
  }

  // ClusterOptions::replace_node (--spares): an agent on the next spare node,
  // in a step of its own, asking for the lost node's rank.
  std::optional<std::string> replace_node(int node_rank) {
    if (run_over || !job) return std::nullopt;
    auto k = static_cast<std::size_t>(node_rank);
    if (!nodes[k].empty()) lost_nodes.push_back(nodes[k]);  // "": a replacement's node, never known
    if (spares.empty()) return replacement_allocation(node_rank);
    auto spare = spares.front();
    spares.pop_front();
    if (!start_spare_step(node_rank, spare, job_id)) return std::nullopt;
    return spare;
  }

  // No spare left in submit mode: SLURM is asked for one more node, not one
  // of the lost ones, as a job of its own (the healthy nodes keep their
  // place, and a one-node request is scheduled soonest). Once it runs, the
  // node's agent starts in it as a spare's would. One per lost node; one
  // that SLURM refuses or that never joins ends the replacements.
  std::optional<std::string> replacement_allocation(int node_rank) {
    if (!hold || replacement_refused) return std::nullopt;
    for (auto& r : replacements)
      if (r.node_rank == node_rank && r.hold && !r.hold->granted()) {
        r.hold->cancel();  // the launcher gave up waiting for it (--join-timeout)
        replacement_refused = true;
        return std::nullopt;
      }
    auto request = plan.request;
    request.nodes = 1;
    request.nodelist.clear();
    request.no_kill = true;
    auto excluded = lost_nodes;
    if (!plan.request.exclude.empty())
      for (auto& n : slurm::expand_hostlist(plan.request.exclude, "--exclude")) excluded.push_back(std::move(n));
    request.exclude = slurm::compress_hostlist(excluded);
    auto index = replacements.size();
    auto k = static_cast<std::size_t>(node_rank);
    replacements.push_back({node_rank, nodes[k], nullptr});
    // Until the new node is known, SLURM's word on the lost one (its task's
    // end, its step's) no longer speaks of this node rank.
    nodes[k].clear();
    step_of[k] = kNoStep;
    SallocHold::Events ev;
    ev.pending = [this, index](const std::string& id) {
      notice(fmt::format("SLURM job {} is pending: a node in {}'s place", id, replacements[index].lost));
    };
    ev.granted = [this, index](const std::string& id) { on_replacement_granted(index, id); };
    ev.ended = [this, index](const SallocEnd& e) {
      auto& r = replacements[index];
      if (r.hold && r.hold->granted()) return;  // released with the run
      replacement_refused = true;
      auto why = e.errors.empty() ? e.last_line : join(e.errors, "; ");
      if (!run_over)
        job->node_failed(r.node_rank, fmt::format("SLURM did not grant an allocation in its place: {}", why));
    };
    ev.line = [this](const std::string& line) { write_log(line); };
    try {
      replacements[index].hold =
          std::make_unique<SallocHold>(io, slurm::salloc_argv(request), in.inherited, in.cwd, std::move(ev));
    } catch (const Error& e) {
      notice(fmt::format("cannot ask SLURM for a node in {}'s place: {}", replacements[index].lost, e.what()));
      replacement_refused = true;
      return std::nullopt;
    }
    return std::string("a node of a new SLURM allocation");
  }

  void on_replacement_granted(std::size_t index, const std::string& id) {
    run_slurm_command(io, {"squeue", "-h", "-j", id, "-o", "%N"}, in.inherited,
                      [this, index, id](const std::string& out, int status) {
                        auto& r = replacements[index];
                        auto list = out.substr(0, out.find('\n'));
                        if (run_over) return;
                        if (status != 0 || list.empty()) {
                          replacement_refused = true;
                          job->node_failed(r.node_rank,
                                           fmt::format("SLURM job {} started, but squeue did not say where", id));
                          return;
                        }
                        auto node = slurm::expand_hostlist(list, "squeue's node list").front();
                        notice(fmt::format("SLURM job {} is running on {}: it takes {}'s place", id, node, r.lost));
                        if (!start_spare_step(r.node_rank, node, id)) {
                          replacement_refused = true;
                          job->node_failed(r.node_rank, fmt::format("cannot start an agent on {}", node));
                        }
                      });
  }

  // The agent of node `node_rank` on `node`, in a one-node step of SLURM job `in_job`.
  bool start_spare_step(int node_rank, const std::string& spare, const std::string& in_job) {
    auto k = static_cast<std::size_t>(node_rank);
    std::vector<std::string> agent = {in.self_exe};
    for (auto& a : job->agent_args(rendezvous::local_hostname(), node_rank, spare)) agent.push_back(std::move(a));
    agent.emplace_back("--slurm-step");
    slurm::AgentStep s{in_job, {spare}, cpus_per_task, {}};
    auto argv = slurm::agent_srun_argv(s, agent);
    auto environment = slurm::agent_srun_environment(in.inherited);
    for (const auto& [name, value] : job->agent_environment()) environment[name] = value;
    write_log("sgpu: " + env::shell_join(argv));
    nodes[k] = spare;  // SLURM's word on that node now speaks of node_rank
    step_of[k] = steps.size();
    try {
      add_step(argv, environment);
    } catch (const Error& e) {
      notice(fmt::format("cannot start an agent on spare {}: {}", spare, e.what()));
      return false;
    }
    return true;
  }

  void on_step_line(const slurm::SrunLine& l, const std::string& line) {
    write_log(line);
    using K = slurm::SrunLine::Kind;
    switch (l.kind) {
      case K::NodeFailure:
        say(fmt::format("SLURM reports a node failure on {}", l.node), false);
        if (node_rank(l.node) >= 0) job->node_failed(node_rank(l.node), "SLURM reports a node failure");
        break;
      case K::Cancelled:
        if (l.detail == "TIME LIMIT") {
          time_limit = true;
          say(fmt::format("SLURM's time limit ended job {}", job_id));
        } else if (l.detail.empty()) {
          preempted = true;
          say(fmt::format("SLURM job {} was cancelled (scancel)", job_id));
        } else if (l.detail != "NODE FAILURE") {
          preempted = l.detail.find("PREEMPT") != std::string::npos || preempted;
          say(fmt::format("SLURM cancelled job {}: {}", job_id, l.detail));
        }
        break;
      case K::Aborted:
        aborted = true;
        break;
      case K::TaskEnded:
        if (node_rank(l.node) >= 0) job->node_failed(node_rank(l.node), fmt::format("its agent ended: {}", l.detail));
        break;
      case K::Error:
        step_errors.push_back(l.detail);
        if (!run_over) notice(fmt::format("srun: {}", l.detail));
        break;
      case K::Other:
        // An agent that could not take part says why before it exits.
        if (line.rfind("sgpu: error:", 0) == 0) notice(fmt::format("srun: {}", line));
        break;
    }
  }

  void on_step_exit(std::size_t index, int status) {
    if (index == 0) timer.cancel();
    // How the step ended, beside every line srun wrote: with the agents'
    // "Exited with exit code N", what a user compares with sgpu's own code.
    write_log(fmt::format("sgpu: srun exited: {}", env::ExitStatus::from_wait_status(status).describe()));
    if (run_over) return;
    // Every node that has not reported never will.
    auto why = step_errors.empty() ? fmt::format("srun ended ({}) before its agent reported",
                                                 env::ExitStatus::from_wait_status(status).describe())
                                   : fmt::format("srun: {}", join(step_errors, "; "));
    for (std::size_t k = 0; k < nodes.size(); ++k)
      if (step_of[k] == index) job->node_failed(static_cast<int>(k), why);
  }

  // ClusterOptions::refine_end: an attempt that did not complete may be
  // SLURM's doing even where srun's banner was lost or comes later (it
  // races the agents' reports): SLURM's own record says, asked once, before
  // any node hears the verdict.
  void refine(env::JobEnd& end, std::function<void()> settled) {
    if (!slurm_said.empty() || end.kind == env::JobEnd::Kind::Completed || job_id.empty()) {
      apply_rule(end);
      return settled();
    }
    run_slurm_command(io, {"squeue", "-h", "-t", "all", "-j", job_id, "-o", std::string(slurm::kSqueueFormat)},
                      in.inherited, [this, &end, settled = std::move(settled)](const std::string& out, int) {
                        if (auto s = slurm::parse_squeue_line(out)) learn_from_squeue(*s);
                        apply_rule(end);
                        settled();
                      });
  }

  void learn_from_squeue(const slurm::SlurmJobState& s) {
    if (s.state == "TIMEOUT" || s.reason == "TimeLimit") {
      time_limit = true;
      say(fmt::format("SLURM's time limit ended job {}", job_id));
    } else if (s.state == "NODE_FAIL" || s.reason == "NodeDown") {
      say(fmt::format("SLURM ended job {}: a node failed", job_id), false);
    } else if (s.state == "PREEMPTED") {
      preempted = true;
      say(fmt::format("SLURM preempted job {}", job_id));
    } else if (s.state == "CANCELLED" || (aborted && s.state == "COMPLETING")) {
      preempted = true;
      say(fmt::format("SLURM job {} was cancelled (scancel)", job_id));
    } else if (aborted && s.state == "RUNNING") {
      // The job lives on: SLURM ended only the step (a node's step daemon
      // died, say), and what the nodes said is the cause.
      notice(fmt::format("SLURM aborted the job step; job {} is still running", job_id));
    }
  }

  // SLURM's signal reached ranks or agents first (their ends are its
  // effect); a lost node stays the cause unless SLURM's time limit ended
  // everything.
  void apply_rule(env::JobEnd& end) const {
    if (!scheduler_stopped) return;
    using Kind = env::JobEnd::Kind;
    bool effect = end.kind == Kind::RankFailed || end.kind == Kind::Interrupted || end.kind == Kind::SpawnFailed ||
                  end.kind == Kind::Preempted;
    // Ranks that saved their checkpoint on SLURM's SIGTERM and exited 0 were
    // still preempted: the run did not finish, and must say so to be resumed.
    bool checkpointed = preempted && !time_limit && end.kind == Kind::Completed;
    if (!effect && !checkpointed && !(time_limit && end.kind != Kind::Completed)) return;
    env::JobEnd stopped;
    // Preempted or cancelled from outside: the ranks were stopped to be
    // resumed (README "Stopping well"); a time limit or a node is SLURM's own end.
    stopped.kind = preempted && !time_limit ? env::JobEnd::Kind::Preempted : env::JobEnd::Kind::StoppedByScheduler;
    stopped.reason = slurm_said;
    stopped.time_limit = time_limit;
    stopped.signal = SIGTERM;  // what SLURM sends a step it cancels
    end = stopped;
  }

  // The run is over: srun normally ends as its agents do; one waiting on a
  // node SLURM has not yet declared dead is stopped.
  void on_run_over() {
    run_over = true;
    auto running = [this] {
      return std::any_of(steps.begin(), steps.end(), [](const auto& st) { return st->running(); });
    };
    if (!running()) return;
    timer.expires_after(kStepEndWait);
    timer.async_wait([this, running](boost::system::error_code ec) {
      if (ec || !running()) return;
      for (const auto& st : steps)
        if (st->running()) st->signal(SIGTERM);
      timer.expires_after(kStepEndWait);
      timer.async_wait([this](boost::system::error_code ec2) {
        if (ec2) return;
        for (const auto& st : steps)
          if (st->running()) st->signal(SIGKILL);
      });
    });
  }
};

}  // namespace

struct SlurmSession::Impl {
  explicit Impl(asio::io_context& loop) : io(loop) {}
  SlurmLaunch in;
  asio::io_context& io;
  std::unique_ptr<SlurmRun> run;
  bool released = false;
};

SlurmSession::SlurmSession(boost::asio::io_context& io, SlurmLaunch launch) : impl_(std::make_unique<Impl>(io)) {
  impl_->in = std::move(launch);
}

SlurmSession::~SlurmSession() = default;

JobOutcome SlurmSession::run(const RunStart& start, JobHost& host) {
  auto& s = *impl_;
  const auto& in = s.in;
  auto allocation = slurm::slurm_allocation(in.inherited);
  auto plan = plan_slurm_job(in.spec, allocation);
  s.run = std::make_unique<SlurmRun>(s.io, in, plan);
  auto& run = *s.run;
  run.open_log(start.dir);
  for (const auto& note : plan.notes) run.notice(fmt::format("note: {}", note));
  if (allocation) {
    run.job_id = allocation->job_id;
    run.nodes = plan.nodes;
    run.spares.assign(plan.spare_nodes.begin(), plan.spare_nodes.end());
    if (!allocation->cpus_per_node.empty())
      run.cpus_per_task =
          *std::min_element(allocation->cpus_per_node.begin(), allocation->cpus_per_node.begin() + plan.nnodes);
  } else {
    run.request_allocation();
    run.wait_for_allocation();
    s.io.restart();
  }

  ClusterOptions copts;
  copts.nnodes = plan.nnodes;
  copts.node_names = run.nodes;
  copts.join_timeout = in.join_timeout;
  copts.heartbeat_timeout = in.heartbeat_timeout;
  copts.master_addr = in.spec.rendezvous.master_addr;
  copts.notice = run.notice;
  copts.on_end = [&run] { run.on_run_over(); };
  copts.refine_end = [&run](env::JobEnd& end, std::function<void()> settled) { run.refine(end, std::move(settled)); };
  copts.run = start;
  copts.spares = static_cast<int>(run.spares.size());
  copts.replacements = run.hold != nullptr;  // sgpu's own allocation: SLURM can be asked for more
  copts.replace_node = [&run](int node_rank, const std::string&) { return run.replace_node(node_rank); };
  if (in.spec.signal_before) copts.end_by = run.allocation_end();
  ClusterJob job(s.io, plan.node_spec, copts, in.cwd, host);
  run.start_step(job);
  return job.run();  // returns when the run is over and srun has ended
}

void SlurmSession::release(int exit_code) {
  auto& s = *impl_;
  if (s.released || !s.run) return;
  s.released = true;
  s.run->release(exit_code);
}

}  // namespace sgpu::launcher
