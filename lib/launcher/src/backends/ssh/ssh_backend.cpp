#include "backends/ssh/ssh_backend.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "backends/ssh/remote_env.hpp"
#include "backends/ssh/ssh_command.hpp"
#include "backends/ssh/ssh_keys.hpp"
#include "backends/ssh/ssh_nodes.hpp"
#include "backends/ssh/ssh_scripts.hpp"
#include "backends/ssh/ssh_settings.hpp"
#include "backends/ssh/sync.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/launcher/plan/dry_run.hpp"
#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;
namespace asio = boost::asio;

namespace {

std::string read_file(const std::string& path, std::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{} {}: cannot read the file", flag, path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string label(const ssh::HostEntry& h) { return fmt::format("{} ({})", h.host, h.origin); }

// ~/.ssh must exist for ssh to create the ControlMaster socket in it.
void ensure_ssh_dir() {
  const passwd* pw = ::getpwuid(::getuid());  // NOLINT(concurrency-mt-unsafe): before any thread
  if (pw == nullptr || pw->pw_dir == nullptr) return;
  auto dir = fs::path(pw->pw_dir) / ".ssh";
  std::error_code ec;
  if (!fs::exists(dir, ec)) ::mkdir(dir.c_str(), 0700);
}

ssh::SshOptions ssh_options(const JobSpec& spec) {
  const auto& s = ssh::settings(spec);
  ssh::SshOptions o;
  o.config_file = s.config_file;
  o.identity = s.identity;
  o.user = s.user;
  o.port = s.port;
  const auto& timeout = s.connect_timeout.limit();
  o.connect_timeout_s = timeout ? std::max(1, static_cast<int>(timeout->count())) : 10;
  o.options = s.options;
  for (const auto& opt : s.options) ssh::check_ssh_option(opt, where_set(spec, "ssh.options", "--ssh-option"));
  // Repeated runs reuse one authenticated connection per host (ControlPersist).
  o.control_path = "~/.ssh/sgpu-%C";
  ensure_ssh_dir();
  return o;
}

// The shipped binary's name changes whenever the binary does.
std::string shipped_path(const std::string& self_exe) {
  std::error_code ec;
  auto size = fs::file_size(self_exe, ec);
  auto mtime = fs::last_write_time(self_exe, ec).time_since_epoch().count();
  return fmt::format("~/.cache/sgpu/bin/sgpu-{}-{:x}", size, static_cast<unsigned long long>(mtime));
}

// The step that ships and builds the --sync-env environment.
constexpr const char* kEnvStep = "building the Python environment (--sync-env)";

// How long a lost node's ssh session may take to end after the rendezvous
// lost the node, before the run ends without its word (a cut network leaves
// ssh waiting for its own keepalive).
constexpr auto kSessionEndWait = std::chrono::seconds(5);

// The ssh sessions' side of the job: each session's end is the one entry
// point of a node failure (node_failed), and explains a node the rendezvous
// lost first (ClusterOptions::refine_end). A session is one host's; its node
// rank is the job's node it runs, until a spare's session replaces it.
class Handler : public SshNodesHandler {
 public:
  Handler(asio::io_context& io, ClusterJob& job, std::vector<std::string> labels, std::vector<std::string> hosts)
      : job_(job), wait_(io) {
    for (std::size_t k = 0; k < labels.size(); ++k) add_session(static_cast<int>(k), std::move(labels[k]), hosts[k]);
  }
  void on_node_exit(int node, const SshNodeExit& exit) override {
    auto k = static_cast<std::size_t>(node);
    auto& session = sessions_[k];
    session.exited = true;
    auto failure = ssh::classify_ssh_exit(session.label, exit);
    if (failure) session.failure = failure;  // kept even after the end: it may explain a node the rendezvous lost
    if (pending_ && pending_node_ == k) settle();
    // ended_: the launcher ended this session itself; retired: a spare runs its node now.
    if (!failure || ended_ || session.retired) return;
    if (!first_) first_ = failure;
    if (nodes_) nodes_->stop_starting();
    job_.node_failed(session.node_rank, failure->message, failure->exit_code);
  }
  // --spares: session `index` (a spare's) runs node `node_rank` from now on.
  void add_session(int node_rank, std::string label, std::string host) {
    sessions_.push_back({std::move(label), std::move(host), node_rank, false, false, std::nullopt});
  }
  // --spares: node `node_rank`'s session is ended (its agent was lost); its
  // end no longer speaks for the node, which a spare's session runs next.
  void retire(int node_rank, std::chrono::steady_clock::duration wait) {
    for (std::size_t k = 0; k < sessions_.size(); ++k) {
      auto& session = sessions_[k];
      if (session.node_rank != node_rank || session.retired) continue;
      session.retired = true;
      if (nodes_ && !session.exited) nodes_->end_one(static_cast<int>(k), wait);
    }
  }
  // A node the rendezvous lost: its ssh session says why (an agent killed by
  // a signal, the connection lost) and what that means as an exit code. A
  // session still open is waited for, at most kSessionEndWait.
  void refine(env::JobEnd& end, std::function<void()> settled) {
    // The newest session on that host (a spare may have replaced an older one).
    auto it = std::find_if(sessions_.rbegin(), sessions_.rend(), [&](const Session& x) { return x.host == end.host; });
    if (end.kind != env::JobEnd::Kind::NodeLost || it == sessions_.rend()) return settled();
    pending_node_ = static_cast<std::size_t>(sessions_.rend() - it - 1);
    pending_end_ = &end;
    pending_ = std::move(settled);
    if (sessions_[pending_node_].exited) return settle();
    wait_.expires_after(kSessionEndWait);
    wait_.async_wait([this](boost::system::error_code ec) {
      if (!ec) settle();
    });
  }
  // The run is over (ClusterOptions::on_end): every session still open is
  // ended, and run() returns once each ssh has exited.
  void on_end(std::chrono::steady_clock::duration wait) {
    ended_ = true;
    if (nodes_) nodes_->end(wait);
  }
  // --sync-env: a node's build step ended; what it said (built, or found
  // built by another launch) and how long it took go to the run's record.
  void on_step_done(int node, const std::string& what, const std::vector<std::string>& said, double seconds) override {
    if (!env_sync_ || what != kEnvStep || static_cast<std::size_t>(node) >= env_sync_->nodes.size()) return;
    auto& n = env_sync_->nodes[static_cast<std::size_t>(node)];
    n.seconds = seconds;
    n.outcome = std::find(said.begin(), said.end(), "sgpu-env: found") != said.end() ? "found" : "built";
    diagnostic("sgpu:   {}: the environment is {} ({:.1f} s)\n", n.node,
               n.outcome == "found" ? "there: another launch built it meanwhile" : "built", seconds);
  }
  void attach(SshNodes& nodes) { nodes_ = &nodes; }
  void attach(std::shared_ptr<LaunchPlan::EnvSync> sync) { env_sync_ = std::move(sync); }
  const std::optional<ssh::NodeFailure>& first() const { return first_; }

 private:
  void settle() {
    wait_.cancel();
    if (const auto& failure = sessions_[pending_node_].failure) {
      pending_end_->reason = failure->message;
      pending_end_->cause_code = failure->exit_code;
    }
    if (auto then = std::exchange(pending_, nullptr)) then();
  }

  struct Session {
    std::string label;
    std::string host;  // as the rendezvous names its node
    int node_rank = 0;
    bool retired = false;  // a spare's session runs its node now
    bool exited = false;
    std::optional<ssh::NodeFailure> failure;
  };

  ClusterJob& job_;
  std::deque<Session> sessions_;  // by SshNodes index
  std::optional<ssh::NodeFailure> first_;
  SshNodes* nodes_ = nullptr;
  std::shared_ptr<LaunchPlan::EnvSync> env_sync_;
  bool ended_ = false;
  asio::steady_timer wait_;
  std::function<void()> pending_;  // refine's `settled`, until the lost node's session ends
  std::size_t pending_node_ = 0;
  env::JobEnd* pending_end_ = nullptr;
};

// --sync-env: one line for the environment, then a line per node that gets
// something (all of them when they are few).
void announce_env_sync(const LaunchPlan::EnvSync& sync) {
  int shipping = 0;
  for (const auto& n : sync.nodes) shipping += n.present ? 0 : 1;
  diagnostic("sgpu: --sync-env: environment {} (Python {}, {} package{}): {} of {} node{} {}\n", sync.hash, sync.python,
             sync.packages, sync.packages == 1 ? "" : "s", sync.nodes.size() - shipping, sync.nodes.size(),
             sync.nodes.size() == 1 ? "" : "s", sync.nodes.size() == 1 ? "has it" : "have it");
  int shown = 0;
  for (const auto& n : sync.nodes)
    if (!n.present && shown++ < 8) diagnostic("sgpu:   {}: {}\n", n.node, env_sync_node_text(n, false));
  if (shipping > 8) diagnostic("sgpu:   and {} more nodes\n", shipping - 8);
}

}  // namespace

SshHosts choose_ssh(const JobSpec& spec) {
  const auto& s = ssh::settings(spec);
  if (!s.hostfile.empty() && !s.hosts.empty())
    throw Error("--hostfile and --hosts exclude each other; give the hosts one way");
  std::vector<ssh::HostEntry> pool;
  std::string pool_name;
  if (!s.hostfile.empty()) {
    pool = ssh::parse_hostfile(read_file(s.hostfile, "--hostfile"), s.hostfile);
    pool_name = "--hostfile " + s.hostfile;
  } else if (!s.hosts.empty()) {
    std::string list;
    for (const auto& h : s.hosts) list += (list.empty() ? "" : ",") + h;
    // Named as the user gave them: "--hosts" or "job.toml:12:9: ssh.hosts".
    pool_name = spec.origins.contains("ssh.hosts") ? spec.origins.at("ssh.hosts") : "--hosts";
    if (auto eq = pool_name.find(" = "); eq != std::string::npos) pool_name.resize(eq);
    if (pool_name.starts_with("--hosts ")) pool_name = "--hosts";
    pool = ssh::parse_hosts_list(list, pool_name);
  } else {
    throw Error("--backend ssh needs hosts: --hostfile FILE or --hosts a:8,b:8");
  }
  std::vector<ssh::HostFilter> include, exclude;
  if (!spec.include.empty()) include = ssh::parse_host_filter(spec.include, "--include");
  if (!spec.exclude.empty()) exclude = ssh::parse_host_filter(spec.exclude, "--exclude");
  for (const auto* filters : {&include, &exclude})
    for (const auto& f : *filters)
      if (f.host.empty())
        throw Error(fmt::format("{} ':{}': which host? With --backend ssh every part names one: 'a:{}'",
                                filters == &include ? "--include" : "--exclude", f.devices.front(), f.devices.front()));
  auto candidates = ssh::filter_hosts(pool, include, exclude);
  if (candidates.empty()) throw Error(fmt::format("no hosts left in {} after --include/--exclude", pool_name));

  ssh::HostRequest req;
  req.pool_name = pool_name;
  if (spec.gpus) {
    req.ranks = *spec.gpus;
    req.per_node = spec.gpus_per_node;
    req.gpu_type = spec.gpu_type;
  } else {
    // CPU ranks: --nproc on each of --nnodes hosts (every host by default).
    int per = spec.nproc.value_or(1);
    int n = spec.origins.contains("resources.nodes") ? spec.nodes : static_cast<int>(candidates.size()) - spec.spares;
    if (n < 1)
      throw Error(fmt::format("{}: {} lists {} host{}, none left for the job itself; pass --nnodes N",
                              where_set(spec, "resources.spares", fmt::format("--spares {}", spec.spares)), pool_name,
                              candidates.size(), candidates.size() == 1 ? "" : "s"),
                  kExitUsage);
    req.ranks = per * n;
    req.per_node = per;
    req.ranks_flag = fmt::format("--nproc {} on {} hosts:", per, n);
    req.per_node_flag = "--nproc";
    for (auto& c : candidates) c.known = false, c.pinned = false;  // slots count GPUs, not CPU ranks
  }
  auto chosen = ssh::select_hosts(candidates, req);
  for (const auto& n : chosen)
    if (n.ranks != chosen.front().ranks)
      throw Error(
          fmt::format("--gpus {} would put {} ranks on {} but {} on {}; every node runs the same number: "
                      "pass --gpus-per-node N",
                      req.ranks, chosen.front().ranks, chosen.front().entry.host, n.ranks, n.entry.host));
  SshHosts out{chosen, {}};
  if (spec.spares <= 0) return out;
  // --spares: the next hosts of the pool that can run a node's share, held
  // for a node that is lost.
  auto where = where_set(spec, "resources.spares", fmt::format("--spares {}", spec.spares));
  std::vector<ssh::CandidateHost> rest;
  for (const auto& c : candidates)
    if (std::none_of(chosen.begin(), chosen.end(), [&](const auto& n) { return n.entry.host == c.entry.host; }))
      rest.push_back(c);
  if (static_cast<int>(rest.size()) < spec.spares)
    throw Error(fmt::format("{}: {} has {} host{} beyond the {} the job runs on; list more hosts, or ask for fewer "
                            "spares",
                            where, pool_name, rest.size(), rest.size() == 1 ? "" : "s", chosen.size()),
                kExitUsage);
  int per = chosen.front().ranks;
  auto spare_req = req;
  spare_req.ranks = per * spec.spares;
  spare_req.per_node = per;
  spare_req.ranks_flag = fmt::format("{} with {} rank{} each:", where, per, per == 1 ? "" : "s");
  spare_req.per_node_flag = where;
  try {
    out.spares = ssh::select_hosts(rest, spare_req);
  } catch (const Error& e) {
    throw Error(
        fmt::format("{}: the spares must each run a node's {} rank{}: {}", where, per, per == 1 ? "" : "s", e.what()),
        kExitUsage);
  }
  if (static_cast<int>(out.spares.size()) > spec.spares) out.spares.resize(static_cast<std::size_t>(spec.spares));
  return out;
}

std::vector<ssh::NodeAssignment> choose_ssh_hosts(const JobSpec& spec) { return choose_ssh(spec).nodes; }

namespace {

// What every node runs: this side's interpreter ($SGPU_PYTHON), its share of
// --gpus, and the environment forwarded to it ([env], --env-file, -x).
JobSpec node_job_spec(const SshLaunch& in, const ssh::Settings& s, int ranks) {
  JobSpec node_spec = in.spec;
  if (auto py = in.inherited.find("SGPU_PYTHON"); node_spec.python.empty() && py != in.inherited.end())
    node_spec.python = py->second;
  if (in.env) node_spec.python.clear();  // each node's copy of the environment: SGPU_PYTHON, set per node
  if (node_spec.gpus) node_spec.gpus = ranks;
  ssh::RemoteEnvSources sources;
  sources.spec_env = in.spec.env;
  for (const auto& f : s.env_files)
    sources.env_files.push_back(ssh::parse_env_file(read_file(f, "--env-file"), f, in.inherited));
  sources.x_flags = s.forward_env;
  node_spec.env = ssh::remote_environment(in.inherited, sources);
  return node_spec;
}

// --sync: the files shipped, and where the nodes run in their copy (at the
// same place relative to it as here).
struct SyncPlan {
  std::string node_cwd;
  std::vector<std::string> files;
};
SyncPlan sync_plan(const SshLaunch& in, const ssh::Settings& s) {
  SyncPlan plan{in.cwd, {}};
  if (s.sync.empty()) return plan;
  auto root = fs::weakly_canonical(fs::absolute(s.sync));
  plan.files = sync_file_list(root.string(), s.sync_exclude);
  auto rel = fs::weakly_canonical(in.cwd).lexically_relative(root);
  plan.node_cwd = rel.empty() || rel.native().starts_with("..") ? "." : rel.string();
  return plan;
}

// The agents dial back to the address their ssh session came from, unless
// --rdzv-endpoint says where (behind ProxyJump or NAT that address is not
// ours); the launcher then listens on its port.
std::string launcher_host(const JobSpec& spec, ClusterOptions& copts) {
  if (spec.rendezvous.endpoint.empty()) return ssh::kLauncherAddress;
  auto where = where_set(spec, "rendezvous.endpoint", "--rdzv-endpoint");
  if (where.starts_with("--rdzv-endpoint ")) where = "--rdzv-endpoint";
  auto endpoint = rendezvous::parse_endpoint(spec.rendezvous.endpoint, where);
  copts.listen = rendezvous::Endpoint{"", endpoint.port};
  return endpoint.host;
}

// Each node's ssh steps: the binary (--ship-sgpu), the --sync copy, then
// the agent, which learns the run's secret on its stdin. Made once for the
// job's nodes, and again for a spare that takes a lost node's place.
class NodeSteps {
 public:
  NodeSteps(const SshLaunch& in, const ClusterJob& job, const SyncPlan& sync, std::string dial_back)
      : in_(in), job_(job), opts_(ssh_options(in.spec)), dial_back_(std::move(dial_back)) {
    const auto& s = ssh::settings(in.spec);
    remote_sync_ = "~/.cache/sgpu/sync/" + job.run_id();
    if (!s.sync.empty()) {
      tarball_ = job.run_dir() + "/sync.tar.gz";
      make_sync_tarball(fs::weakly_canonical(fs::absolute(s.sync)).string(), sync.files, tarball_);
    }
    program_ = s.ship_sgpu ? shipped_path(in.self_exe) : "sgpu";
    for (const auto& [name, value] : job.agent_environment()) {
      boot_.secret_names.push_back(name);
      secrets_ += value + "\n";
    }
    if (!s.sync.empty()) {
      boot_.cd = remote_sync_ + (sync.node_cwd == "." ? "" : "/" + sync.node_cwd);
      boot_.remove_after = remote_sync_;  // each run ships its own copy: none is left behind
    }
    if (in.env) env_tars_ = ssh::make_env_tarballs(*in.env, job.run_dir());
  }

  // Node `node_rank` on `chosen`; `k` its index in the --sync-env record
  // (-1: none, a spare's).
  SshNode make(const ssh::NodeAssignment& chosen, int node_rank, int k, const std::string& name = {}) const {
    const auto& s = ssh::settings(in_.spec);
    const auto& opts = opts_;
    const auto& in = in_;
    const auto& program = program_;
    const auto& host = chosen.entry;
    bool env_here = in.env && k >= 0;
    auto kk = static_cast<std::size_t>(k);
    SshNode node{host.host, {}};
    if (s.ship_sgpu)
      node.steps.push_back(
          {"copying sgpu", ssh::ssh_argv(opts, host, ssh::ship_binary_script(program)), in.self_exe, ""});
    if (!s.sync.empty())
      node.steps.push_back(
          {"unpacking --sync " + s.sync, ssh::ssh_argv(opts, host, ssh::unpack_script(remote_sync_)), tarball_, ""});
    if (env_here && !env_tars_[kk].empty())
      node.steps.push_back(
          {kEnvStep, ssh::ssh_argv(opts, host, ssh::env_build_command(in.env->lock)), env_tars_[kk], ""});
    auto b = boot_;
    if (env_here) {
      b.exports.emplace_back("SGPU_PYTHON", ssh::env_python(in.env->lock, in.env->probes[kk].home));
      b.prelude = ssh::env_use_prelude(in.env->lock);
    }
    if (!chosen.devices.empty()) {
      std::string list;
      for (int d : chosen.devices) list += (list.empty() ? "" : ",") + std::to_string(d);
      b.exports.emplace_back("CUDA_VISIBLE_DEVICES", list);
    }
    b.argv = {program};
    for (auto& a : job_.agent_args(dial_back_, node_rank, name)) b.argv.push_back(std::move(a));
    b.argv.emplace_back("--watch-stdin");  // ssh's stdin: the session ends the agent (SshNodes::end)
    node.steps.push_back(
        {"starting the agent", ssh::ssh_argv(opts, host, ssh::agent_bootstrap_script(b)), "", secrets_});
    return node;
  }

 private:
  const SshLaunch& in_;
  const ClusterJob& job_;
  ssh::SshOptions opts_;
  std::string dial_back_;
  std::string remote_sync_;
  std::string tarball_;
  std::string program_;
  ssh::AgentBootstrap boot_;
  std::string secrets_;
  std::vector<std::string> env_tars_;
};

}  // namespace

JobOutcome run_ssh_job(asio::io_context& io, const SshLaunch& in, const RunStart& run, JobHost& job_host) {
  const auto& s = ssh::settings(in.spec);
  auto [chosen, spare_hosts] = choose_ssh(in.spec);
  auto node_spec = node_job_spec(in, s, chosen.front().ranks);
  auto sync = sync_plan(in, s);

  ClusterOptions copts;
  copts.nnodes = static_cast<int>(chosen.size());
  copts.join_timeout = in.join_timeout;
  copts.heartbeat_timeout = in.heartbeat_timeout;
  for (const auto& n : chosen) copts.node_names.push_back(n.entry.host);
  copts.master_addr = in.spec.rendezvous.master_addr;
  copts.run = run;
  if (in.env) {
    copts.env_sync = std::make_shared<LaunchPlan::EnvSync>(ssh::env_sync_record(*in.env, chosen));
    announce_env_sync(*copts.env_sync);
  }
  // Once the run is over, the sessions still open are ended and waited for:
  // an agent stops its ranks within the grace, then a few seconds for ssh.
  Handler* handler_at_end = nullptr;
  auto session_wait = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      in.spec.grace.required("--grace") + env::Seconds(5));
  copts.on_end = [&handler_at_end, &session_wait] {
    if (handler_at_end) handler_at_end->on_end(session_wait);
  };
  copts.refine_end = [&handler_at_end](env::JobEnd& end, std::function<void()> settled) {
    if (!handler_at_end) return settled();
    handler_at_end->refine(end, std::move(settled));
  };
  // --spares: a lost node's place goes to the next spare host, whose
  // session starts now; the lost node's session is ended.
  struct Spares {
    std::deque<ssh::NodeAssignment> left;
    const NodeSteps* steps = nullptr;
    SshNodes* starter = nullptr;
    Handler* handler = nullptr;
  } spares{{spare_hosts.begin(), spare_hosts.end()}};
  {  // with none held, a lost node's end says that --spares would have replaced it
    copts.spares = static_cast<int>(spare_hosts.size());
    copts.replace_node = [&spares, &session_wait](int node_rank, const std::string&) -> std::optional<std::string> {
      if (spares.left.empty() || spares.starter == nullptr) return std::nullopt;
      auto spare = std::move(spares.left.front());
      spares.left.pop_front();
      spares.handler->retire(node_rank, session_wait);
      auto index = spares.starter->add(spares.steps->make(spare, node_rank, -1, spare.entry.host));
      if (index < 0) return std::nullopt;
      spares.handler->add_session(node_rank, label(spare.entry), spare.entry.host);
      return spare.entry.host;
    };
  }
  auto dial_back = launcher_host(in.spec, copts);
  ClusterJob job(io, node_spec, copts, sync.node_cwd, job_host);
  NodeSteps steps(in, job, sync, dial_back);
  std::vector<SshNode> nodes;
  for (std::size_t k = 0; k < chosen.size(); ++k)
    nodes.push_back(steps.make(chosen[k], static_cast<int>(k), static_cast<int>(k)));

  std::vector<std::string> labels;
  std::vector<std::string> hosts;
  for (const auto& n : chosen) {
    labels.push_back(label(n.entry));
    hosts.push_back(n.entry.host);
  }
  Handler handler(io, job, labels, std::move(hosts));
  SshNodes starter(io, std::move(nodes), s.max_parallel, handler);
  handler.attach(starter);
  if (copts.env_sync) handler.attach(copts.env_sync);
  spares.steps = &steps;
  spares.starter = &starter;
  spares.handler = &handler;
  handler_at_end = &handler;
  starter.start();
  // --sync-env's tars were read by the steps before the agents: none stays.
  struct DropTars {
    std::string dir;
    ~DropTars() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(fs::path(dir) / "env-sync", ec);
    }
  } drop_tars{in.env ? job.run_dir() : std::string()};
  try {
    return job.run();  // once the job ended everywhere and every ssh has exited
  } catch (const Error&) {
    if (handler.first()) throw Error(handler.first()->message, handler.first()->exit_code);
    throw;
  }
}

namespace {

class SshBackend : public Backend {
 public:
  void check(LaunchContext& ctx) override {
    const auto& spec = ctx.spec;
    const auto& s = ssh::settings(spec);
    if (s.hosts.empty() && s.hostfile.empty())
      throw Error(fmt::format("{}: needs hosts = [\"host:slots\", ...] or hostfile = \"FILE\" in [ssh]",
                              where_set(spec, "resources.backend", "--backend ssh")));
    if (spec.origins.contains("resources.nodes") && !s.hosts.empty() && static_cast<int>(s.hosts.size()) < spec.nodes)
      throw Error(fmt::format("{}: [ssh] hosts lists only {} host{}",
                              where_set(spec, "resources.nodes", fmt::format("--nnodes {}", spec.nodes)),
                              s.hosts.size(), s.hosts.size() == 1 ? "" : "s"));
    auto limits = node_limits(spec);
    in_.join_timeout = limits.join_timeout;
    in_.heartbeat_timeout = limits.heartbeat_timeout;
    auto hosts = choose_ssh(ctx.spec);  // reads the hostfile: its mistakes are said before any ssh
    chosen_ = std::move(hosts.nodes);
    spares_ = std::move(hosts.spares);
    if (!spares_.empty() && s.sync_env)
      throw Error(fmt::format("{}: --sync-env builds the environment on the job's hosts before the start, and a "
                              "spare's is not built yet; use a shared or prepared environment with spares",
                              where_set(spec, "resources.spares", fmt::format("--spares {}", spec.spares))),
                  kExitUsage);
    if (!s.envs.empty()) {  // --envs: the hosts' cached environments, instead of a job
      auto answer = ssh::envs_command(spec, ctx.inherited, chosen_, ssh_options(spec));
      throw BackendAnswer(std::move(answer.text), answer.exit_code);
    }
    // --sync-env: every node is asked now, so one that cannot run the
    // environment is said before the run exists.
    if (s.sync_env)
      in_.env = ssh::prepare_env_sync(spec, ctx.inherited, ctx.cwd, chosen_, ssh_options(spec), ctx.dry_run);
  }

  PlannedLayout describe(const LaunchContext& ctx) override {
    PlannedLayout layout;
    for (const auto& n : chosen_) layout.nodes.push_back({n.entry.host, std::nullopt});
    for (const auto& n : spares_) layout.spares.push_back(n.entry.host);
    layout.master_addr = ctx.spec.rendezvous.master_addr.empty() && !chosen_.empty() ? chosen_.front().entry.host
                                                                                     : ctx.spec.rendezvous.master_addr;
    if (in_.env) layout.env_sync = ssh::env_sync_record(*in_.env, chosen_);
    return layout;
  }

  BackendRun run(LaunchContext& ctx, const RunStart& run, JobHost& host) override {
    static_cast<LaunchContext&>(in_) = ctx;
    return {run_ssh_job(*ctx.io, in_, run, host), {}};
  }

 private:
  SshLaunch in_;
  std::vector<ssh::NodeAssignment> chosen_;
  std::vector<ssh::NodeAssignment> spares_;  // --spares: held for a lost node
};

}  // namespace

BackendInfo ssh_backend_info() {
  return {.name = "ssh",
          .flag_name = "ssh",
          .can = {.spare_nodes = true},
          .keys = ssh::spec_keys,
          .make = []() -> std::unique_ptr<Backend> { return std::make_unique<SshBackend>(); }};
}

}  // namespace sgpu::launcher
