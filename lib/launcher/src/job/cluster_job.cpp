#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/launcher/job/network_report.hpp"

#include "job/node_inquiry.hpp"
#include "job/preflight_judge.hpp"

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/job/job_wire.hpp"
#include "sgpu/launcher/preflight/preflight.hpp"
#include "sgpu/launcher/process/job_control.hpp"
#include "sgpu/launcher/process/open_files.hpp"
#include "sgpu/launcher/runs/run_state.hpp"
#include "sgpu/rendezvous/server.hpp"

namespace sgpu::launcher {
namespace asio = boost::asio;
namespace rdzv = sgpu::rendezvous;
namespace fs = std::filesystem;

namespace {

constexpr auto kFirstProgress = std::chrono::seconds(5);
constexpr auto kProgressEvery = std::chrono::seconds(30);
// How long the nodes have to answer: how far their ranks got, and their
// stacks (each node reads its ranks in parallel, each read bounded by 4 s).
constexpr auto kInquiryLimit = std::chrono::milliseconds(3000);
constexpr auto kStacksLimit = std::chrono::milliseconds(6000);

std::chrono::milliseconds to_ms(env::Seconds s) { return std::chrono::duration_cast<std::chrono::milliseconds>(s); }

Stream local(rdzv::OutputStream s) { return s == rdzv::OutputStream::Out ? Stream::Out : Stream::Err; }

}  // namespace

struct ClusterJob::Impl : rdzv::ServerHandler, JobControl::Actions {
  enum class NodeState { Running, Done, Lost };

  asio::io_context& io;
  JobSpec spec;
  ClusterOptions options;
  std::string cwd;
  std::string run_id;
  std::string run_dir;
  rdzv::Secret secret;
  std::unique_ptr<rdzv::RendezvousServer> server;
  std::unique_ptr<JobControl> control;  // made once the spec's durations are read
  NodeInquiries inquiries;              // --hang-timeout's and the stacks' questions to the nodes
  asio::steady_timer progress_timer;
  JobHost& host;
  JobObserver* observer = nullptr;
  std::vector<rdzv::NodeInfo> nodes;
  std::vector<NodeState> node_state;
  std::vector<std::array<bool, 2>> output_open;  // by global rank
  JobOutcome outcome;
  Clock::time_point attempt_started{};
  rdzv::Start start_info;              // MASTER_ADDR/PORT of the attempt running
  std::uint32_t next_master_port = 0;  // node 0's reservation for the next attempt, if any
  std::optional<env::JobEnd> gone;     // a node lost after it finished its attempt: no attempt can follow
  std::size_t joined = 0;
  bool started = false;
  bool between_attempts = false;  // every node done; JobControl decides: restart or the end
  bool finished = false;
  bool stacks_offered = false;  // host.offer_stacks has a taker to withdraw
  std::optional<std::pair<std::string, int>> failure;
  PreflightJudge preflight_judge;             // --preflight: the verdict over every node's report
  std::optional<NetworkExplained> explained;  // --explain-network, once the check passed
  // --spares: the lost nodes whose spare is on its way (by node rank), each
  // bounded by --join-timeout; the attempt's end is recorded once all are ready.
  std::map<std::uint32_t, asio::steady_timer> replacing;
  std::set<std::uint32_t> in_attempt;  // of `replacing`: spares joining the attempt running (replace_in_attempt)
  bool record_held = false;
  std::vector<std::string> attempt_hosts;  // by node rank, the attempt running's (summary.json's attempts[].nodes)
  std::map<std::uint32_t, env::JobEnd> lost_ends;  // by node rank: why the node a spare replaces was lost
  // A lost node no spare could replace: its host, and what its end says of
  // that (kept through the backend's word on the end, which rewrites the reason).
  std::optional<std::pair<std::string, std::string>> no_spare;

  Impl(asio::io_context& io_, JobSpec s, ClusterOptions o, std::string dir, JobHost& host_)
      : io(io_),
        spec(std::move(s)),
        options(std::move(o)),
        cwd(std::move(dir)),
        secret(options.secret ? *options.secret : rdzv::Secret::generate()),
        inquiries(io_, [this](std::uint32_t node, const rdzv::Inspect& ask) { server->send(node, ask); }),
        progress_timer(io_),
        host(host_),
        preflight_judge(spec, options.run.dir, options.notice) {
    if (options.nnodes < 1) throw Error(fmt::format("--nnodes {}: must be at least 1", options.nnodes));
    allow_node_connections(options.nnodes);
    if (!options.notice) options.notice = [](const std::string& text) { diagnostic("sgpu: {}\n", text); };
    run_id = options.run.id;
    run_dir = options.run.dir;
    control = std::make_unique<JobControl>(io, ClusterJob::control_options(spec, options), *this);
    rdzv::ServerOptions so;
    so.nnodes = static_cast<std::uint32_t>(options.nnodes);
    so.expected_names = options.node_names;
    so.join_timeout = to_ms(options.join_timeout);
    so.heartbeat_timeout = to_ms(options.heartbeat_timeout);
    so.run_id = run_id;
    auto added = host.ranks_env();
    for (const auto& [name, value] : added) spec.env[name] = value;
    std::optional<long long> end_by;
    if (options.end_by)
      end_by = std::chrono::duration_cast<std::chrono::seconds>(options.end_by->time_since_epoch()).count();
    so.job = encode_job({spec, cwd, added, end_by});
    so.master_addr = options.master_addr;
    so.readmit = options.replace_node && (options.spares > 0 || options.replacements);
    server = std::make_unique<rdzv::RendezvousServer>(io, options.listen, secret, so, *this);
  }

  std::string node_name(std::size_t node) const {
    if (node < nodes.size()) return nodes[node].name;
    if (node < options.node_names.size()) return options.node_names[node];
    return fmt::format("node rank {}", node);
  }

  // --- the rendezvous ---
  void on_notice(const std::string& text) override { options.notice(text); }

  void on_joined(std::size_t count, std::uint32_t) override { joined = count; }

  // --preflight: each node checked its GPUs before saying Ready. A node whose
  // all-reduce failed ends the rendezvous at once (the others' workers would
  // wait for it until their time limit); once all have reported, the
  // verdict over all.
  std::optional<rdzv::Message> on_node_ready(const rdzv::NodeInfo& node, std::size_t ready,
                                             std::uint32_t nnodes) override {
    if (!spec.preflight.enabled) return std::nullopt;
    return preflight_judge.on_report(node, ready, nnodes);
  }

  // --explain-network: the check passed; every node ends here, no rank started.
  std::optional<rdzv::Finish> on_network_checked(const std::vector<rdzv::NodeInfo>& checked,
                                                 const rdzv::Start& start) override {
    if (!spec.rendezvous.explain_network) return std::nullopt;
    explained.emplace();
    explained->master_addr = start.master_addr;
    explained->master_port = static_cast<int>(start.master_port);
    explained->nodes = checked;
    return rdzv::Finish{0, "every node reaches MASTER_ADDR; no rank was started (--explain-network)"};
  }

  void arm_progress(std::chrono::seconds after) {
    progress_timer.expires_after(after);
    progress_timer.async_wait([this](boost::system::error_code ec) {
      if (ec || started || failure) return;
      options.notice(
          fmt::format("waiting for nodes on port {}: {} of {} joined", server->port(), joined, options.nnodes));
      arm_progress(kProgressEvery);
    });
  }

  void on_started(const std::vector<rdzv::NodeInfo>& infos, const rdzv::Start& start) override {
    started = true;
    progress_timer.cancel();
    nodes = infos;
    node_state.assign(nodes.size(), NodeState::Running);
    std::vector<NodePlacement> placement;
    int world = 0;
    for (const auto& n : nodes) {
      placement.push_back(
          {static_cast<int>(n.node_rank), n.name, static_cast<int>(n.rank_base), static_cast<int>(n.local_ranks)});
      world += static_cast<int>(n.local_ranks);
    }
    start_info = start;
    outcome.started = Clock::now();
    attempt_started = outcome.started;
    outcome.ranks.resize(static_cast<std::size_t>(world));
    fresh_ranks();
    output_open.assign(static_cast<std::size_t>(world), {false, false});
    try {
      auto plan = ClusterJob::job_plan(spec, run_id, run_dir, cwd, placement, start.master_addr,
                                       static_cast<int>(start.master_port));
      for (const auto& n : nodes) plan.routes.push_back({n.name, n.socket_interface, n.reach_us / 1000.0});
      if (options.env_sync) plan.env_sync = *options.env_sync;
      // ranks/<r>/ appear as each rank's logs and files arrive, not all at
      // once here: thousands of mkdirs would hold up every node's heartbeat.
      observer = &host.observe(io, plan);
    } catch (const Error& e) {
      // Nothing can show or keep the run: every node stops at once.
      failure = {e.what(), e.exit_code()};
      server->abort(e.what(), e.exit_code());
      stop_waiting();
      return;
    }
    observer->on_nodes_placed(placement);
    control->start();
  }

  void on_failed(const std::string& message, int exit_code) override {
    if (!failure) failure = {message, exit_code};
    stop_waiting();
  }

  // --- the run ---
  bool owns(std::uint32_t node, std::uint32_t rank) const {
    const auto& n = nodes[node];
    return rank >= n.rank_base && rank < n.rank_base + n.local_ranks;
  }

  void on_node_message(std::uint32_t node, rdzv::Message&& message) override {
    if (node >= nodes.size() || node_state[node] == NodeState::Lost) return;
    std::visit([&](auto& m) { handle(node, m); }, message);
  }

  template <typename M>
  void handle(std::uint32_t, M&) {}

  template <typename M>
  bool valid(std::uint32_t node, const M& m) {
    if (owns(node, m.rank)) return true;
    options.notice(fmt::format("ignored a message from node {} about rank {}, which is not one of its ranks",
                               node_name(node), m.rank));
    return false;
  }

  void handle(std::uint32_t node, rdzv::RankStarted& m) {
    if (!valid(node, m)) return;
    auto& rec = outcome.ranks[m.rank];
    rec.pid = m.pid;
    rec.started = Clock::now();
    output_open[m.rank] = {true, true};
    observer->on_rank_started(static_cast<int>(m.rank), m.pid);
  }

  void handle(std::uint32_t node, rdzv::RankOutput& m) {
    if (!valid(node, m)) return;
    // The message's bytes, moved (not copied) where the log writer can keep them.
    auto bytes = std::make_shared<const std::string>(std::move(m.bytes));
    observer->on_rank_output(static_cast<int>(m.rank), local(m.stream), *bytes, bytes);
  }

  void handle(std::uint32_t node, rdzv::RankOutputClosed& m) {
    if (!valid(node, m)) return;
    output_open[m.rank][static_cast<std::size_t>(m.stream)] = false;
    observer->on_rank_output_closed(static_cast<int>(m.rank), local(m.stream));
  }

  void handle(std::uint32_t node, rdzv::RankFile& m) {
    if (!valid(node, m)) return;
    // Kept where a one-node run keeps it, so logs and the report read it alike.
    auto dir = fs::path(run_dir) / "ranks" / std::to_string(m.rank);
    std::error_code ec;
    fs::create_directories(dir, ec);
    auto path = dir / (m.kind == rdzv::RankFileKind::Error ? "error.json" : "result");
    auto tmp = path;
    tmp += ".part";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(m.content.data(), static_cast<std::streamsize>(m.content.size()));
      if (!out) {
        options.notice(fmt::format("cannot write {}", path.string()));
        return;
      }
    }
    fs::rename(tmp, path, ec);
  }

  void handle(std::uint32_t node, rdzv::RankExited& m) {
    if (!valid(node, m)) return;
    auto& rec = outcome.ranks[m.rank];
    rec.status = m.status;
    rec.ended = Clock::now();
    rec.terminated_by_sgpu = m.terminated_by_sgpu || (!m.status.success() && control->stopping());
    observer->on_rank_exited(static_cast<int>(m.rank), m.status, rec.terminated_by_sgpu);
    control->rank_exited(static_cast<int>(m.rank), m.status, node_name(node));
  }

  void handle(std::uint32_t node, rdzv::NodeTeardown& m) {
    using Kind = env::JobEnd::Kind;
    if (control->stopping()) return;
    auto cause = m.cause;
    cause.host = node_name(node);
    if (cause.kind == Kind::Interrupted || cause.kind == Kind::Preempted) {
      // The node got a signal (scancel, ssh hangup): the whole job stops.
      control->stop(cause, control->stop_signal());
    } else if (cause.kind == Kind::SpawnFailed) {
      cause.reason = m.detail;
      outcome.spawn_error = m.detail;
      control->stop(cause, control->stop_signal());
    }
    // RankFailed arrives as its RankExited; NodeLost is the node's own view.
  }

  void handle(std::uint32_t node, rdzv::NodeDone& m) {
    if (node == 0 && m.next_master_port > 0 && m.next_master_port <= 65535) next_master_port = m.next_master_port;
    node_state[node] = NodeState::Done;
    maybe_finish();
  }

  void handle(std::uint32_t node, rdzv::Abort& m) { lose(node, m.message, std::nullopt); }

  void handle(std::uint32_t node, rdzv::Inspection& m) { inquiries.on_answer(node, m); }
  // --health-gate on a node: a GPU its agent left out, for the console, events.jsonl and summary.json.
  void handle(std::uint32_t node, rdzv::NodeExcluded& m) {
    Exclusion e{nodes[node].name, static_cast<int>(m.gpu), m.reason, static_cast<int>(m.attempt)};
    outcome.excluded.push_back(e);
    if (observer) observer->on_excluded(e);
  }

  // --sample-every: a node's sample, to the launcher's observers (metrics.jsonl, stragglers, /metrics).
  void handle(std::uint32_t /*node*/, rdzv::NodeSamples& m) {
    if (auto sample = decode_samples(m.json); sample && observer) observer->on_sample(*sample);
  }

  // The nodes whose ranks still run: what a question about progress or
  // stacks goes to.
  std::vector<InquiryNode> running_nodes() const {
    std::vector<InquiryNode> out;
    for (std::size_t i = 0; i < nodes.size(); ++i)
      if (node_state[i] == NodeState::Running && !in_attempt.contains(static_cast<std::uint32_t>(i)))  // no ranks yet
        out.push_back({static_cast<std::uint32_t>(i), nodes[i].name, static_cast<int>(nodes[i].rank_base),
                       static_cast<int>(nodes[i].local_ranks)});
    return out;
  }

  // JobControl::Actions, --hang-timeout: each node knows its ranks' output and heartbeats.
  void progress_age(std::function<void(std::optional<env::Seconds>)> answer) override {
    if (!started || between_attempts) return answer(std::nullopt);
    inquiries.ask_progress(running_nodes(), kInquiryLimit, std::move(answer));
  }
  void inspect(const env::JobEnd& why, std::function<void(std::string)> done) override {
    if (!started || between_attempts) return done("");
    take_stacks(
        false, [done = std::move(done)](const Inspection& in) { done(in.report.verdict); },
        why.reason.empty() ? env::describe_end(why) : why.reason);
  }
  // Every node's ranks' stacks, kept in the run directory; printed under
  // `headline` unless it is "".
  void take_stacks(bool native, std::function<void(const Inspection&)> done, std::string headline) {
    auto began = std::chrono::steady_clock::now();
    inquiries.ask_stacks(running_nodes(), native, kStacksLimit,
                         [this, began, headline, done = std::move(done)](std::vector<RankStack> stacks) {
                           auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began);
                           done(present_stacks(run_dir, headline, std::move(stacks), seconds.count()));
                         });
  }

  void on_node_lost(std::uint32_t node, const std::string& why) override { lose(node, why, std::nullopt); }

  // What the backend's replace_node returned: a spare's name ("spare c"),
  // or, with a space in it, what it asked for while no node is known yet
  // ("a node of a new SLURM allocation").
  static std::string spare_label(const std::string& spare) {
    return spare.find(' ') == std::string::npos ? "spare " + spare : spare;
  }

  std::vector<NodePlacement> placement() const {
    std::vector<NodePlacement> out;
    for (const auto& n : nodes)
      out.push_back(
          {static_cast<int>(n.node_rank), n.name, static_cast<int>(n.rank_base), static_cast<int>(n.local_ranks)});
    return out;
  }

  // Every rank's record, blank for an attempt, naming the node it runs on.
  void fresh_ranks() {
    attempt_hosts.clear();
    for (const auto& n : nodes) attempt_hosts.push_back(n.name);
    for (std::size_t r = 0; r < outcome.ranks.size(); ++r) {
      outcome.ranks[r] = RankRecord{};
      outcome.ranks[r].rank = static_cast<int>(r);
    }
    for (const auto& n : nodes)
      for (auto r = n.rank_base; r < n.rank_base + n.local_ranks && r < outcome.ranks.size(); ++r)
        outcome.ranks[r].host = n.name;
  }

  // --spares: a spare takes lost node `node`'s place for the next attempt,
  // if a restart would follow one (restarts left, nothing ending the run for
  // good) and the backend has one left. `end` is marked replaced (a restart
  // may follow it) when it does; with none left, its reason says so.
  bool replace(std::uint32_t node, env::JobEnd& end) {
    if (!options.replace_node) return false;
    auto candidate = end;
    candidate.replaced = true;
    if (!control->would_restart(candidate)) return false;
    auto lost_name = nodes[node].name;
    auto spare = options.replace_node(static_cast<int>(node), lost_name);
    if (!spare) {
      no_spare = {end.host, options.spares == 0 ? std::string("; no spare node was held to take its place "
                                                              "(--spares N keeps N hosts ready)")
                                                : fmt::format("; no spare is left to take its place (--spares {}, "
                                                              "all used)",
                                                              options.spares)};
      end.reason += no_spare->second;
      return false;
    }
    end.replaced = true;
    auto next = control->attempt() + 1;
    if (!replacing.contains(node)) lost_ends[node] = end;
    options.notice(fmt::format("node {} (node rank {}) was lost; {} takes its place for attempt {}", lost_name, node,
                               spare_label(*spare), next));
    if (!replacing.contains(node)) {
      Exclusion e{lost_name, -1, fmt::format("the node was lost: {}", end.reason), next};
      outcome.excluded.push_back(e);
      if (observer) observer->on_excluded(e);
    }
    nodes[node].name = *spare;
    arm_spare(node, *spare, next);
    return true;
  }

  // The place of node `node` is open to `spare`'s agent, for `attempt` on,
  // within --join-timeout.
  void arm_spare(std::uint32_t node, const std::string& spare, int attempt) {
    server->readmit(node, static_cast<std::uint32_t>(attempt));
    auto [it, fresh] = replacing.try_emplace(node, io);
    it->second.expires_after(to_ms(options.join_timeout));
    it->second.async_wait([this, node, spare](boost::system::error_code ec) {
      if (ec) return;
      on_replacement_failed(node, fmt::format("{} did not join within {} (--join-timeout)", spare_label(spare),
                                              env::format_duration(options.join_timeout)));
    });
  }

  // --spares: a node that could not start its share of the attempt running
  // (its health gate refused it, or its agent was lost before any of its
  // ranks started) is replaced in this same attempt: the other nodes' ranks
  // wait for the spare's in their own rendezvous (init_process_group), and
  // no restart is spent. Not node 0, which MASTER_ADDR names.
  bool replace_in_attempt(std::uint32_t node, const env::JobEnd& end) {
    if (!options.replace_node || (options.spares == 0 && !options.replacements) || node == 0 || !started ||
        between_attempts || control->stopping())
      return false;
    const auto& n = nodes[node];
    for (auto r = n.rank_base; r < n.rank_base + n.local_ranks; ++r)
      if (outcome.ranks[r].pid > 0) return false;  // some of its ranks ran: the attempt cannot go on without them
    auto lost_name = n.name;
    auto spare = options.replace_node(static_cast<int>(node), lost_name);
    if (!spare) return false;
    auto attempt = control->attempt();
    if (!replacing.contains(node)) lost_ends[node] = end;
    options.notice(fmt::format("node {} (node rank {}) could not start attempt {}; {} takes its place in it", lost_name,
                               node, attempt, spare_label(*spare)));
    if (!replacing.contains(node)) {
      Exclusion e{lost_name, -1, fmt::format("the node could not start attempt {}: {}", attempt, end.reason), attempt};
      outcome.excluded.push_back(e);
      if (observer) observer->on_excluded(e);
    }
    nodes[node].name = *spare;
    for (auto r = n.rank_base; r < n.rank_base + n.local_ranks; ++r) outcome.ranks[r].host = *spare;
    attempt_hosts[node] = *spare;
    in_attempt.insert(node);
    node_state[node] = NodeState::Running;  // the attempt waits for its ranks
    arm_spare(node, *spare, attempt);
    return true;
  }

  void on_node_replaced(const rdzv::NodeInfo& info, const std::optional<rdzv::Start>& start) override {
    auto it = replacing.find(info.node_rank);
    if (finished || it == replacing.end()) return;
    replacing.erase(it);
    nodes[info.node_rank] = info;
    if (start) {  // a new node 0: its address and its MASTER_PORT
      start_info.master_addr = start->master_addr;
      start_info.master_port = start->master_port;
      next_master_port = 0;
    }
    if (in_attempt.contains(info.node_rank) && !between_attempts && !control->stopping()) {
      in_attempt.erase(info.node_rank);
      observer->on_nodes_placed(placement());
      server->start_spare(info.node_rank, rdzv::Restart{static_cast<std::uint32_t>(control->attempt()),
                                                        start_info.master_addr, start_info.master_port});
      return;
    }
    if (record_held && replacing.empty()) {
      record_held = false;
      record_attempt();
    }
  }

  // The spare on its way failed (its agent refused the place, failed or left,
  // or never joined): the next spare, else the run ends naming both.
  void on_replacement_failed(std::uint32_t node, const std::string& why) override {
    auto it = replacing.find(node);
    if (finished || it == replacing.end()) return;
    auto spare = nodes[node].name;
    options.notice(fmt::format("{} cannot take node rank {}'s place: {}", spare_label(spare), node, why));
    // The run's end, if it comes to that, is the lost node's (its code: the
    // backend's word on it once the attempt was over), with what followed.
    auto end = lost_ends[node];
    if (outcome.end.kind == env::JobEnd::Kind::NodeLost && outcome.end.host == end.host) end = outcome.end;
    end.replaced = false;
    auto followed = fmt::format("; {} could not take its place: {}", spare_label(spare), why);
    end.reason += followed;
    bool joining_attempt = in_attempt.erase(node) > 0;
    if (joining_attempt ? replace_in_attempt(node, end) : replace(node, end)) return;
    if (no_spare && no_spare->first == end.host) no_spare->second.insert(0, followed);
    replacing.erase(node);
    node_state[node] = NodeState::Lost;  // nothing of it will report
    control->stop_for_good(end, control->stop_signal());
    asio::post(io, [this] { maybe_finish(); });
    if (record_held && replacing.empty()) {
      record_held = false;
      record_attempt();
    }
  }

  // `code`: what the node's ending means, when its backend knows it.
  void lose(std::uint32_t node, const std::string& why, std::optional<int> code) {
    if (node >= nodes.size() || finished || node_state[node] == NodeState::Lost) return;
    if (in_attempt.contains(node)) return;  // the replaced agent's last word (its connection's end): a spare is coming
    env::JobEnd end;
    end.kind = env::JobEnd::Kind::NodeLost;
    end.host = nodes[node].name;
    end.reason = why;
    end.cause_code = code;
    if (node_state[node] == NodeState::Running && replace_in_attempt(node, end)) {
      inquiries.node_gone(node);
      return;
    }
    if (node_state[node] == NodeState::Done) {
      // Its ranks are over; it matters only to an attempt that would need it.
      node_state[node] = NodeState::Lost;
      if (control->restart_pending() && replace(node, end)) return;
      if (!gone) gone = end;
      if (control->restart_pending()) {
        options.notice(fmt::format("node {} was lost after its ranks ended: {}; no restart", end.host, why));
        control->stop_for_good(end, control->stop_signal());
      }
      return;
    }
    node_state[node] = NodeState::Lost;
    inquiries.node_gone(node);
    const auto& n = nodes[node];
    // Whatever its ranks printed without a newline is shown now.
    for (auto r = n.rank_base; r < n.rank_base + n.local_ranks; ++r) {
      for (auto s : {Stream::Out, Stream::Err}) {
        auto& open = output_open[r][s == Stream::Out ? 0 : 1];
        if (open) observer->on_rank_output_closed(static_cast<int>(r), s);
        open = false;
      }
    }
    // A spare takes its place in the next attempt (--spares).
    if (replace(node, end)) {
      if (!control->stopping()) control->stop(end, control->stop_signal());
      maybe_finish();
      return;
    }
    // A lost node cannot start again: the run ends, naming it (also when
    // an attempt that would have restarted is being torn down).
    if (!control->stop_for_good(end, control->stop_signal()))
      options.notice(fmt::format("node {} was lost while stopping: {}", n.name, why));
    maybe_finish();
  }

  // JobControl::Actions: every node, through the rendezvous.
  void signal_job(int sig) override { server->broadcast(rdzv::Signal{sig, rdzv::SignalMode::Teardown}); }
  void kill_job() override { server->broadcast(rdzv::Signal{SIGKILL, rdzv::SignalMode::Kill}); }
  void forward_signal(int sig) override { server->broadcast(rdzv::Signal{sig, rdzv::SignalMode::Forward}); }
  void on_stopping(const env::JobEnd& cause) override {
    outcome.end = cause;
    observer->on_teardown(cause);
    // A run ended for good (a signal, the timeout) while its spares were on
    // their way: no attempt waits for them any more.
    if (record_held && !control->restart_pending()) {
      record_held = false;
      replacing.clear();
      in_attempt.clear();
      asio::post(io, [this] { record_attempt(); });
    }
    if (!in_attempt.empty()) asio::post(io, [this] { maybe_finish(); });  // it waited for a spare's ranks
  }
  void on_restart(int attempt, const env::JobEnd& cause, env::Seconds backoff) override {
    observer->on_restart(attempt, cause, backoff);
  }
  void on_signal_before(const env::SignalBefore& signal, Clock::time_point deadline, bool sent) override {
    observer->on_signal_before(signal, deadline, sent);
  }
  // Before every node joined, a signal ends the rendezvous itself.
  void on_signal_before_start(int sig) override {
    if (failure) return;
    auto message = fmt::format("interrupted by {} during the rendezvous", env::signal_name(sig));
    failure = {message, 128 + sig};
    server->abort(fmt::format("the launcher was {}", message), 128 + sig);
    stop_waiting();
  }

  // Every node is done (or lost): the attempt is over; JobControl says
  // whether the group starts again.
  void maybe_finish() {
    if (!started || finished || between_attempts) return;
    for (std::uint32_t k = 0; k < node_state.size(); ++k)  // a spare still joining a stopped attempt runs nothing
      if (node_state[k] == NodeState::Running && !(in_attempt.contains(k) && control->stopping())) return;
    if (gone && control->stopping()) control->stop_for_good(*gone, control->stop_signal());
    between_attempts = true;
    if (!options.refine_end) return record_attempt();
    // The backend's word on the end comes first: the attempt is recorded,
    // and Finish or Restart goes out, with the end it settles on.
    auto refiner = options.refine_end;  // a copy: it may be reset by what it calls
    refiner(outcome.end, [this, once = std::make_shared<bool>(false)] {
      if (std::exchange(*once, true)) return;
      auto& end = outcome.end;
      if (no_spare && end.kind == env::JobEnd::Kind::NodeLost && end.host == no_spare->first &&
          !end.reason.ends_with(no_spare->second))
        end.reason += no_spare->second;
      control->settle_end(outcome.end);  // an end the backend explained may rule out a restart
      record_attempt();
    });
  }

  void record_attempt() {
    if (!replacing.empty() && control->restart_pending()) {
      record_held = true;  // the next attempt needs its spares: once they are ready
      return;
    }
    outcome.attempts.push_back(AttemptOutcome{control->attempt(), outcome.end, outcome.ranks, attempt_started,
                                              Clock::now(), outcome.spawn_error, attempt_hosts});
    control->attempt_over([this](bool again) {
      between_attempts = false;
      if (again)
        restart();
      else
        finish_run();
    });
  }

  void finish_run() {
    finished = true;
    outcome.ended = Clock::now();
    server->finish(rdzv::Finish{outcome.exit_code(), env::describe_end_and_code(outcome.end)});
    stop_waiting();
  }

  // The failed attempt is over everywhere and the backoff has passed: every
  // node starts its ranks again, with node 0's new MASTER_PORT.
  void restart() {
    outcome.end = {};
    outcome.spawn_error.clear();
    fresh_ranks();
    in_attempt.clear();                      // a spare that was joining the last attempt starts with this one
    observer->on_nodes_placed(placement());  // a spare's name for the ranks it took over
    for (auto& open : output_open) open = {false, false};
    node_state.assign(nodes.size(), NodeState::Running);
    if (next_master_port != 0) start_info.master_port = std::exchange(next_master_port, 0);
    attempt_started = Clock::now();
    observer->on_attempt_started(control->attempt());
    server->restart(
        rdzv::Restart{static_cast<std::uint32_t>(control->attempt()), start_info.master_addr, start_info.master_port});
  }

  void stop_waiting() {
    // No spare is waited for any more: their --join-timeout timers would hold the loop (and run()) for minutes.
    replacing.clear();
    in_attempt.clear();
    record_held = false;
    if (options.on_end) std::exchange(options.on_end, nullptr)();
    if (std::exchange(stacks_offered, false)) host.offer_stacks(nullptr);
    control->finish();
    progress_timer.cancel();
  }
};

ClusterJob::ClusterJob(asio::io_context& io, JobSpec spec, ClusterOptions options, std::string cwd, JobHost& host)
    : impl_(std::make_unique<Impl>(io, std::move(spec), std::move(options), std::move(cwd), host)) {}

ClusterJob::~ClusterJob() = default;

int ClusterJob::port() const { return impl_->server->port(); }
const rendezvous::Secret& ClusterJob::secret() const { return impl_->secret; }
const std::string& ClusterJob::run_id() const { return impl_->run_id; }
const std::string& ClusterJob::run_dir() const { return impl_->run_dir; }

std::vector<std::string> ClusterJob::agent_args(const std::string& launcher_host, int node_rank,
                                                const std::string& name) const {
  std::vector<std::string> args{"agent", "--rdzv", rdzv::Endpoint{launcher_host, port()}.str(), "--node-rank",
                                std::to_string(node_rank)};
  const auto& names = impl_->options.node_names;
  if (!name.empty()) {
    args.emplace_back("--node-name");
    args.push_back(name);
  } else if (node_rank >= 0 && static_cast<std::size_t>(node_rank) < names.size()) {
    args.emplace_back("--node-name");
    args.push_back(names[static_cast<std::size_t>(node_rank)]);
  }
  args.emplace_back("--join-timeout");
  args.push_back(env::format_duration(impl_->options.join_timeout));
  return args;
}

env::Environment ClusterJob::agent_environment() const { return {{rdzv::kSecretEnvVar, impl_->secret.text()}}; }

void ClusterJob::node_failed(int node_rank, const std::string& why, std::optional<int> code) {
  auto& s = *impl_;
  if (s.finished || s.failure) return;
  if (!s.started) {
    auto message = fmt::format("node {}: {}", s.node_name(static_cast<std::size_t>(node_rank)), why);
    s.failure = {message, code.value_or(1)};
    s.server->abort(message, code.value_or(1));
    s.stop_waiting();
    return;
  }
  if (s.replacing.contains(static_cast<std::uint32_t>(node_rank))) {
    // The spare's own session failed before its agent took the place.
    s.on_replacement_failed(static_cast<std::uint32_t>(node_rank), why);
    return;
  }
  s.lose(static_cast<std::uint32_t>(node_rank), why, code);
}

JobOutcome ClusterJob::run() {
  auto& s = *impl_;
  s.control->watch_signals();
  s.server->start();
  s.arm_progress(kFirstProgress);
  s.stacks_offered = true;
  s.host.offer_stacks(
      [&s](bool native, std::function<void(const Inspection&)> done) { s.take_stacks(native, std::move(done), ""); });
  s.io.run();
  s.io.restart();
  if (auto done = s.preflight_judge.take_only_result()) throw preflight::PreflightDone(std::move(*done));
  if (s.explained) throw NetworkExplained(std::move(*s.explained));
  if (s.failure) throw Error(s.failure->first, s.failure->second);
  return s.outcome;
}

}  // namespace sgpu::launcher
