#include "sgpu/launcher/job/agent.hpp"

#include <unistd.h>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/env/exit_code.hpp"
#include "sgpu/launcher/devices/devices.hpp"
#include "sgpu/launcher/devices/topology.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/job/job_wire.hpp"
#include "sgpu/launcher/metrics/sampler.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/plan/ray.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/preflight/node_gate.hpp"
#include "sgpu/launcher/preflight/preflight.hpp"
#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/process/open_files.hpp"
#include "sgpu/launcher/process/supervisor.hpp"
#include "sgpu/launcher/runs/recycle.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"
#include "sgpu/rendezvous/client.hpp"
#include "sgpu/rendezvous/host_info.hpp"
#include "sgpu/rendezvous/port_reservation.hpp"

namespace sgpu::launcher {
namespace asio = boost::asio;
namespace rdzv = sgpu::rendezvous;

namespace {

// A rank's file as the launcher reads its own (read_file): a regular file
// only, never through a symlink, never waiting on a FIFO.
std::optional<std::string> read_capped(const std::string& path, std::size_t limit) { return read_file(path, limit); }

rdzv::OutputStream wire(Stream s) { return s == Stream::Out ? rdzv::OutputStream::Out : rdzv::OutputStream::Err; }

}  // namespace

struct Agent::Impl : rdzv::ClientHandler, JobObserver {
  asio::io_context& io;
  AgentOptions options;
  std::string hostname = rdzv::local_hostname();
  std::string ray_token;  // --ray: every node derives the same one from the run's secret (before `client` takes it)
  rdzv::RendezvousClient client;
  std::function<void(const AgentResult&)> on_done;
  JobSpec spec;
  std::string cwd;
  // The run's deadline as the launcher has it (its --timeout from the first
  // start, the scheduler's end if sooner): SGPU_DEADLINE, every attempt.
  std::optional<env::Seconds> run_timeout;
  std::optional<Clock::time_point> run_end_by;
  std::optional<Clock::time_point> deadline;
  bool deadline_known = false;
  std::string run_id;
  std::string executable;
  Discovery discovery;
  std::optional<Topology> topology;  // this node's, read when --cpu-bind or --report-bindings asks
  int local_ranks = 0;
  rdzv::Assign assign;
  std::optional<rdzv::PortReservation> master_port;  // node 0 holds MASTER_PORT for the run
  std::optional<rdzv::PortReservation> next_port;    // node 0, with restarts: the next attempt's, reserved ahead
  int attempt = 0;                                   // TORCHELASTIC_RESTART_COUNT of the ranks running
  std::string run_dir;
  LaunchPlan plan;
  std::map<int, env::RankFiles> files;
  std::unique_ptr<Supervisor> supervisor;
  std::unique_ptr<preflight::NodePreflight> preflight;  // --preflight, between Assign and Start
  preflight::NodeGate gate;                             // --health-gate, before each attempt
  std::unique_ptr<metrics::Sampler> sampler;            // --sample-every: while this node's ranks run
  bool ranks_finished = false;
  // The signals that would end this process (SIGINT, SIGTERM, SIGHUP,
  // SIGUSR1/2), held from its ranks' first start to its end: the
  // Supervisor's JobControl lets go of them as its ranks end (Asio then
  // restores the default action), but the agent lives on until the
  // launcher's verdict, and SLURM signals a step's tasks more than once
  // (SIGTERM, SIGCONT, SIGTERM): a later one must not end it with another
  // code than the launcher's.
  std::optional<asio::signal_set> held;
  bool supervising = false;      // a Supervisor's JobControl owns the signals now
  std::optional<int> signalled;  // a stop signal that came while it did not
  std::optional<AgentResult> lost;
  bool done = false;
  std::optional<asio::posix::stream_descriptor> session;  // --watch-stdin: a copy of fd 0
  std::array<char, 512> session_buf{};

  Impl(asio::io_context& io_, AgentOptions o, rdzv::Secret secret)
      : io(io_),
        options(std::move(o)),
        ray_token(launcher::ray_token(secret)),
        client(io_, rdzv::ClientOptions{options.launcher, to_ms(options.join_timeout), std::chrono::seconds(10)},
               std::move(secret), *this) {
    options.environment.erase(rdzv::kSecretEnvVar);  // ranks run user code: they do not get the secret
    if (options.node_name.empty()) options.node_name = hostname;
  }

  static std::chrono::milliseconds to_ms(env::Seconds s) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(s);
  }

  // Errors this node causes name it: the launcher shows them as they are.
  [[noreturn]] void fail_here(const Error& e) const {
    throw Error(fmt::format("node {}: {}", options.node_name, e.what()), e.exit_code());
  }

  PlanInputs inputs(int port, const std::string& master_addr) const {
    PlanInputs in;
    in.inventory = discovery.gpus;
    for (auto& g : in.inventory)  // --health-gate: what it left out, for the rest of the run
      if (gate.left_out().contains(g.index)) g.visible = false;
    in.topology = topology;
    in.inherited = options.environment;
    in.run_id = run_id;
    in.run_dir = run_dir;
    in.executable = executable;
    in.cwd = cwd;
    if (spec.ray) in.ray_token = ray_token;
    in.master_port = port;
    in.master_addr = master_addr;
    in.socket_ifname = client.route();  // what the reachability check found: the summary says the same
    in.node_rank = static_cast<int>(assign.node_rank);
    in.nnodes = static_cast<int>(std::max(1U, assign.nnodes));
    in.rank_base = static_cast<int>(assign.rank_base);
    in.world_size = static_cast<int>(assign.world_size);
    in.restart_count = attempt;
    return in;
  }

  void learn_deadline(const JobDescription& job) {
    run_timeout = job.spec.timeout.limit();
    if (job.end_by) run_end_by = Clock::time_point(std::chrono::seconds(*job.end_by));
  }

  // Once, as the first attempt's ranks start: the launcher's timeout starts then too.
  std::optional<Clock::time_point> run_deadline() {
    if (std::exchange(deadline_known, true)) return deadline;
    if (run_timeout) deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(*run_timeout);
    if (run_end_by && (!deadline || *run_end_by < *deadline)) deadline = run_end_by;
    return deadline;
  }

  rdzv::Join on_welcome(const rdzv::Welcome& welcome) override {
    try {
      run_id = welcome.run_id;
      if (options.spec) {  // a static launch's node: its own spec, and what the launcher adds to every rank
        spec = *options.spec;
        cwd = options.cwd;
        auto job = decode_job(welcome.job);
        learn_deadline(job);
        for (const auto& [name, value] : job.added_env) spec.env[name] = value;
        spec.preflight = job.spec.preflight;  // the launcher decides whether, and how, the GPUs are checked
      } else {
        auto job = decode_job(welcome.job);
        learn_deadline(job);
        spec = std::move(job.spec);
        cwd = job.cwd;
        std::error_code ec;
        if (!std::filesystem::is_directory(cwd, ec))
          throw Error(fmt::format("the job's working directory {} does not exist here", cwd), 1);
      }
      discovery = discover_gpus(options.environment);
      // --nproc gpu/auto/cpu means this node's GPUs or CPUs: resolved here, where they are.
      resolve_nproc_mode(spec, discovery.gpus, static_cast<int>(std::max(1U, std::thread::hardware_concurrency())));
      local_ranks = rank_count(spec, discovery.gpus);
      // Each node binds its ranks with its own topology (and its own allocation's CPUs).
      if (needs_topology(spec)) topology = load_topology(options.environment, "--cpu-bind");
      executable = resolve_program(spec, options.environment, cwd);
      make_plan(spec, inputs(0, "127.0.0.1"));  // everything but the placement checked before joining
    } catch (const Error& e) {
      fail_here(e);
    }
    rdzv::Join join;
    join.name = options.node_name;
    join.hostname = hostname;
    join.addresses = rdzv::local_addresses();
    join.interfaces = rdzv::local_interfaces();
    join.rdma = rdzv::rdma_devices();
    join.hostname_address = rdzv::hostname_address(hostname);
    join.gpus = discovery.gpus;
    join.local_ranks = static_cast<std::uint32_t>(local_ranks);
    join.node_rank = options.node_rank.value_or(-1);
    join.nnodes = static_cast<std::uint32_t>(options.nnodes);
    join.pid = ::getpid();
    return join;
  }

  std::optional<rdzv::Ready> on_assign(const rdzv::Assign& a) override {
    assign = a;
    rdzv::Ready ready;
    try {
      if (a.node_rank == 0) {
        master_port.emplace(spec.master_port.value_or(0));
        ready.master_port = static_cast<std::uint32_t>(master_port->port());
      }
      check_open_files_limit(local_ranks);  // before its rank directories are made
      auto root = runs_root(spec.log_dir, options.environment);
      run_dir = make_run_dir(root, run_id, local_ranks, static_cast<int>(a.rank_base));
      if (spec.preflight.enabled && !a.spare) {  // a spare joining later is gated, not all-reduced
        begin_preflight(ready);                  // Ready goes once this node's share is done
        return std::nullopt;
      }
    } catch (const Error& e) {
      fail_here(e);
    }
    return ready;
  }

  // --preflight: this node's GPUs of the job in the all-reduce across every
  // node's, as global ranks from this node's rank base (one GPU a rank).
  void begin_preflight(rdzv::Ready ready) {
    auto request = preflight::preflight_request(spec);
    request.environment = options.environment;
    request.run_dir = run_dir;
    auto here = make_plan(spec, inputs(0, "127.0.0.1"));
    if (here.gpus.empty())
      throw Error(fmt::format("{}: the preflight checks the job's GPUs, and this node runs {} CPU rank{}; ask for GPUs "
                              "(--gpus N), or drop it",
                              where_set(spec, "preflight.enabled", "--preflight"), here.ranks.size(),
                              here.ranks.size() == 1 ? "" : "s"),
                  kExitUsage);
    if (here.gpus.size() != here.ranks.size())
      throw Error(fmt::format("{}: across nodes the preflight runs one all-reduce worker per rank, each on its "
                              "rank's GPU; this node has {} ranks on {} GPUs",
                              where_set(spec, "preflight.enabled", "--preflight"), here.ranks.size(), here.gpus.size()),
                  kExitUsage);
    request.gpus = here.gpus;
    preflight = std::make_unique<preflight::NodePreflight>(
        io, std::move(request), static_cast<int>(assign.rank_base), static_cast<int>(assign.world_size),
        [this](const std::string& id) { client.send(rdzv::PreflightId{id}); },
        [this, ready](std::string report) mutable {
          ready.preflight = std::move(report);
          client.ready(ready);
        });
  }

  void on_start(const rdzv::Start& start) override {
    preflight.reset();  // its workers have ended: every node reported
    start_ranks(start.master_addr, static_cast<int>(start.master_port));
  }

  // The launcher's word after a failed attempt: this node's ranks again.
  void restart(const rdzv::Restart& r) {
    // A spare in a lost node's place (--spares) starts its first ranks here.
    bool spare_first = assign.spare && !supervisor && !ranks_finished;
    if ((!ranks_finished && !spare_first) || lost || done) return;  // it comes once every node said NodeDone
    if (signalled) {
      // Told to stop between attempts: this node takes no other one, and
      // says so (before the signals were held, the signal ended the agent).
      auto message = fmt::format("node {}: {} between attempts", options.node_name, env::signal_name(*signalled));
      client.send(rdzv::Abort{message, 128 + *signalled});
      client.close();
      finish({128 + *signalled, message, false});
      return;
    }
    if (next_port && static_cast<std::uint32_t>(next_port->port()) == r.master_port)
      master_port = std::exchange(next_port, std::nullopt);  // the old port is let go only now
    next_port.reset();
    // The last attempt's files are the launcher's now (kept per attempt):
    // none may pass for this attempt's.
    for (const auto& [rank, f] : files) {
      std::error_code ec;
      std::filesystem::remove(f.error_file, ec);
      std::filesystem::remove(f.result_file, ec);
    }
    ranks_finished = false;
    attempt = static_cast<int>(r.attempt);
    // The last attempt's Supervisor (and its orphan guard) goes once the loop
    // is past anything it queued.
    asio::post(io, [old = std::shared_ptr<Supervisor>(std::move(supervisor))] {});
    start_ranks(r.master_addr, static_cast<int>(r.master_port));
  }

  void start_ranks(const std::string& master_addr, int port) {
    try {
      plan = make_plan(spec, inputs(port, master_addr));
      check_health(master_addr, port);
    } catch (const Error& e) {
      auto message = fmt::format("node {}: {}", options.node_name, e.what());
      client.send(rdzv::Abort{message, e.exit_code()});
      client.close();
      finish({e.exit_code(), message, false});
      return;
    }
    for (auto& r : plan.ranks) {
      if (options.rank_environment) options.rank_environment(r.place, r.env.edit());
      if (plan.report_bindings) diagnostic("sgpu: {}: {}\n", options.node_name, report_line(plan, r));
      files[r.place.rank] = r.files;
    }
    // The launcher owns the job's time limit; this node only stops when told.
    SupervisorOptions supervision;
    auto& control = supervision.control;
    control.grace = plan.grace;
    control.handle_signals = options.handle_signals;
    control.stop_signal = plan.stop_signal;
    control.signal_before = plan.signal_before;
    control.signal_before_once = true;  // from SLURM's --signal or the launcher, the ranks get it once
    control.end_by = run_deadline();    // SGPU_DEADLINE; the launcher alone stops the job at it
    control.repeat_signal_kills = options.repeat_signal_kills;
    supervision.on_end = [this] { supervising = false; };
    if (control.handle_signals && !held) hold_signals();
    supervisor = std::make_unique<Supervisor>(io, *this, supervision);
    supervising = true;
    supervisor->start(rank_launches(plan), [this](const JobOutcome&) { on_ranks_finished(); });
    start_sampling();
  }

  // --health-gate: this node's GPUs of the attempt (and, with restarts,
  // their XIDs since the last one), as the local backend gates its own. A
  // GPU that fails is left out for the rest of the run, the launcher is told
  // (NodeExcluded), and a GPU of this node beyond the job's takes its place;
  // with none left, this node cannot start the attempt (an Error: Abort).
  // The first attempt's GPUs are the preflight's to judge when it runs.
  void check_health(const std::string& master_addr, int port) {
    if (!spec.health_gate || (attempt == 0 && spec.preflight.enabled)) return;
    auto result = gate.check(plan, attempt, spec.max_restarts > 0, discovery.gpus,
                             [&] { return make_plan(spec, inputs(port, master_addr)); });
    if (!result.unread.empty())
      diagnostic("sgpu: note: node {}: the health gate could not read the GPUs' health ({}): they were not checked\n",
                 options.node_name, result.unread);
    for (const auto& f : result.excluded)
      client.send(rdzv::NodeExcluded{static_cast<std::uint32_t>(f.gpu), f.reason, static_cast<std::uint32_t>(attempt)});
    if (!result.refusal.empty()) throw Error(fmt::format("attempt {} cannot start: {}", attempt, result.refusal), 1);
  }

  // --sample-every: this node's ranks and GPUs, each sample sent to the launcher as it is taken.
  void start_sampling() {
    auto every = spec.sample_every.limit();
    if (!every) return;
    sampler = std::make_unique<metrics::Sampler>(
        io,
        metrics::SamplerOptions{*every, static_cast<int>(assign.node_rank), options.node_name,
                                metrics::sampled_gpus(plan)},
        [this] { return supervisor ? supervisor->running_ranks() : std::vector<RunningRank>{}; },
        [this](const NodeSample& sample) {
          if (!done) client.send(rdzv::NodeSamples{encode_samples(sample)});
        });
    sampler->start();
  }

  void hold_signals() {
    held.emplace(io);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) held->add(sig);
    await_signal();
  }

  // While the ranks run their JobControl acts on a signal; after they ended
  // a stop signal only rules out another attempt (restart()).
  void await_signal() {
    held->async_wait([this](boost::system::error_code ec, int sig) {
      if (ec || done) return;
      if (!supervising && sig != SIGUSR1 && sig != SIGUSR2) signalled = sig;
      await_signal();
    });
  }

  void on_message(rdzv::Message&& message) override {
    if (const auto* id = std::get_if<rdzv::PreflightId>(&message)) {
      if (preflight) preflight->unique_id(id->id);
      return;
    }
    if (const auto* finish_msg = std::get_if<rdzv::Finish>(&message)) {
      client.close();
      finish({finish_msg->exit_code, finish_msg->summary, true});
      return;
    }
    if (const auto* again = std::get_if<rdzv::Restart>(&message)) {
      restart(*again);
      return;
    }
    if (const auto* ask = std::get_if<rdzv::Inspect>(&message)) {
      inspect(*ask);
      return;
    }
    const auto* sig = std::get_if<rdzv::Signal>(&message);
    if (sig == nullptr || !supervisor) return;
    switch (sig->mode) {
      case rdzv::SignalMode::Forward:
        supervisor->forward(sig->signal);
        return;
      case rdzv::SignalMode::Teardown: {
        env::JobEnd cause;
        cause.kind = env::JobEnd::Kind::Interrupted;
        cause.signal = sig->signal;
        supervisor->stop(cause, sig->signal);
        return;
      }
      case rdzv::SignalMode::Kill:
        supervisor->kill();
        return;
    }
  }

  // The launcher's question (--hang-timeout, `sgpu stacks`): this node's
  // progress, or its ranks' stacks, taken here where the ranks are.
  void inspect(const rdzv::Inspect& ask) {
    rdzv::Inspection answer;
    answer.id = ask.id;
    if (supervisor) {
      answer.progress_age_ms = static_cast<std::uint64_t>(supervisor->progress_age().count() * 1000);
    }
    if (ask.what == rdzv::InspectWhat::Progress || !supervisor) {
      if (ask.what == rdzv::InspectWhat::Stacks) answer.stacks = "[]";
      client.send(answer);
      return;
    }
    std::vector<StackTarget> targets;
    for (const auto& r : supervisor->running_ranks()) targets.push_back({r.rank, r.pid, options.node_name});
    auto stacks_options = stack_options_for(plan.executable, options.environment);
    stacks_options.native = ask.native;
    take_stacks(io, targets, stacks_options, [this, answer](std::vector<RankStack> stacks) mutable {
      answer.stacks = fit_stacks(std::move(stacks), rdzv::kMaxStacksBytes);
      if (!done) client.send(answer);
    });
  }

  // --watch-stdin: whatever arrives is ignored; the end of input is the end
  // of the ssh session.
  void watch_session() {
    session->async_read_some(asio::buffer(session_buf), [this](boost::system::error_code ec, std::size_t) {
      if (done) return;
      if (!ec) return watch_session();
      client.close();
      on_lost("the launcher's ssh session ended", 128 + SIGHUP);
    });
  }

  void on_lost(const std::string& why, int exit_code) override {
    AgentResult result{exit_code, why, false};
    if (supervisor && !ranks_finished) {
      // No launcher, no job: stop the ranks (the stop signal, SIGKILL after the grace) and end when they have.
      lost = result;
      env::JobEnd cause;
      cause.kind = env::JobEnd::Kind::NodeLost;
      cause.reason = why;
      supervisor->stop(cause, plan.stop_signal);
      return;
    }
    finish(result);
  }

  void on_ranks_finished() {
    ranks_finished = true;
    if (sampler) sampler->stop();
    if (lost) {
      finish(*lost);
      return;
    }
    // Node 0 reserves the next attempt's MASTER_PORT now, while the
    // launcher decides: a restart then needs no round trip. (The old one
    // is held until then, so the two differ.)
    rdzv::NodeDone done_msg;
    if (assign.node_rank == 0 && attempt < spec.max_restarts && !spec.master_port) {
      try {
        next_port.emplace(0);
        done_msg.next_master_port = static_cast<std::uint32_t>(next_port->port());
      } catch (const Error&) {
        next_port.reset();  // the next attempt keeps this one
      }
    }
    client.send(done_msg);  // then the launcher's Finish (or Restart) follows
  }

  void finish(const AgentResult& result) {
    if (done) return;
    done = true;
    preflight.reset();  // a rendezvous that ended during the preflight: its workers go
    if (sampler) sampler->stop();
    master_port.reset();
    next_port.reset();
    boost::system::error_code ignored;
    if (session) session->close(ignored);
    // Its waits go, so the loop can end; the signals stay held until the agent does.
    if (held) held->cancel(ignored);
    if (on_done) on_done(result);
  }

  // JobObserver: this node's ranks, streamed to the launcher.
  void on_rank_started(int rank, int pid) override {
    client.send(rdzv::RankStarted{static_cast<std::uint32_t>(rank), pid});
  }

  void on_rank_output(int rank, Stream stream, std::string_view bytes, const BytesOwner& /*owner*/) override {
    client.send(rdzv::RankOutput{static_cast<std::uint32_t>(rank), wire(stream), std::string(bytes)});
  }

  void on_rank_output_closed(int rank, Stream stream) override {
    client.send(rdzv::RankOutputClosed{static_cast<std::uint32_t>(rank), wire(stream)});
  }

  void on_rank_exited(int rank, const env::ExitStatus& status, bool terminated_by_sgpu) override {
    // The files first, so the launcher has them when it reports the exit.
    if (auto it = files.find(rank); it != files.end()) {
      auto r = static_cast<std::uint32_t>(rank);
      if (auto error = read_capped(it->second.error_file, rdzv::kMaxFileBytes))
        client.send(rdzv::RankFile{r, rdzv::RankFileKind::Error, std::move(*error)});
      if (auto result = read_capped(it->second.result_file, rdzv::kMaxFileBytes))
        client.send(rdzv::RankFile{r, rdzv::RankFileKind::Result, std::move(*result)});
    }
    client.send(rdzv::RankExited{static_cast<std::uint32_t>(rank), status, terminated_by_sgpu});
  }

  void on_teardown(const env::JobEnd& cause) override {
    rdzv::NodeTeardown t{cause, {}};
    t.cause.host = options.node_name;
    if (cause.kind == env::JobEnd::Kind::SpawnFailed)
      t.detail = fmt::format("{}: {}", plan.executable, std::strerror(cause.spawn_errno));
    client.send(t);
  }
};

Agent::Agent(asio::io_context& io, AgentOptions options, rendezvous::Secret secret)
    : impl_(std::make_unique<Impl>(io, std::move(options), std::move(secret))) {}

Agent::~Agent() = default;

void Agent::start(std::function<void(const AgentResult&)> on_done) {
  impl_->on_done = std::move(on_done);
  if (impl_->options.watch_stdin) {
    int fd = ::dup(STDIN_FILENO);
    if (fd < 0) throw Error(fmt::format("--watch-stdin: standard input: {}", std::strerror(errno)));
    impl_->session.emplace(impl_->io, fd);
    impl_->watch_session();
  }
  impl_->client.start();
}

}  // namespace sgpu::launcher
