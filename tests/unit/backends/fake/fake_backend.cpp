// The fake backend (fake_backend.hpp): a folder, its settings table, its
// registry line. Everything else is the engine's and the ClusterJob's.
#include "fake_backend.hpp"

#include <signal.h>
#include <unistd.h>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/launcher/preflight/preflight.hpp"
#include "sgpu/rendezvous/client.hpp"

namespace sgpu::launcher::fake {
namespace {
namespace rdzv = sgpu::rendezvous;
using namespace std::chrono_literals;

const Settings& settings(const JobSpec& spec) { return spec.backend_settings.get<Settings>(); }
Settings& edit(JobSpec& spec) { return spec.backend_settings.edit<Settings>(); }

std::vector<KeyInfo> keys() {
  return {
      {.path = "fake.nodes",
       .kind = ValueKind::StringList,
       .flags = "--fake-nodes",
       .help = "each fake node's behaviour: ok, fail3, hang, vanish, busy, stuck, flaky",
       .apply = [](JobSpec& s, const Setting& v) { edit(s).nodes = as_list(v); }},
      {.path = "fake.lost_code",
       .kind = ValueKind::Int,
       .help = "the exit code a vanished node's end means",
       .min = 1,
       .max = 255,
       .apply = [](JobSpec& s, const Setting& v) { edit(s).lost_code = static_cast<int>(as_int(v)); }},
      {.path = "fake.unreachable",
       .kind = ValueKind::Bool,
       .help = "fail before any node starts",
       .apply = [](JobSpec& s, const Setting& v) { edit(s).unreachable = as_bool(v); }},
  };
}

// One fake node: two ranks that do what `behaviour` says once the job starts.
struct FakeNode : rdzv::ClientHandler {
  boost::asio::io_context& io;
  const JobSpec& spec;
  std::string behaviour;
  std::string name;
  int node_rank;
  std::unique_ptr<rdzv::RendezvousClient> client;
  std::unique_ptr<preflight::NodePreflight> check;
  rdzv::Assign assign;
  int attempt = 0;
  int running = 0;
  bool done = false;

  FakeNode(boost::asio::io_context& io_, const JobSpec& s, std::string b, std::string n, int k)
      : io(io_), spec(s), behaviour(std::move(b)), name(std::move(n)), node_rank(k) {}

  rdzv::Join on_welcome(const rdzv::Welcome&) override {
    rdzv::Join j;
    j.name = name;
    j.hostname = name;
    j.local_ranks = 2;
    j.node_rank = node_rank;
    return j;
  }
  std::optional<rdzv::Ready> on_assign(const rdzv::Assign& a) override {
    assign = a;
    rdzv::Ready ready{a.node_rank == 0 ? 29500U : 0U, ""};  // node 0 names MASTER_PORT (nothing listens)
    if (!spec.preflight.enabled) return ready;
    // --preflight: this node's two GPUs through the real node check, whatever
    // this machine's driver library says of them; Ready once it reported.
    auto request = preflight::preflight_request(spec);
    request.gpus.resize(2);
    request.gpus[1].index = 1;
    // The workers are sgpu's, as an agent's are: the binary built beside this test.
    std::error_code ec;
    auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    request.worker_executable = self.parent_path().parent_path() / "apps" / "sgpu" / "sgpu";
    request.environment = sgpu::env::current_environment();  // as an agent's workers inherit its own
    check = std::make_unique<preflight::NodePreflight>(
        io, std::move(request), static_cast<int>(a.rank_base), static_cast<int>(a.world_size),
        [this](const std::string& id) { client->send(rdzv::PreflightId{id}); },
        [this, ready](std::string report) mutable {
          ready.preflight = std::move(report);
          client->ready(ready);
        });
    return std::nullopt;
  }
  void on_start(const rdzv::Start&) override { start_ranks(); }
  void start_ranks() {
    ++record().attempts_started;
    for (std::uint32_t r = 0; r < 2; ++r)
      client->send(rdzv::RankStarted{assign.rank_base + r, 1000 + static_cast<int>(r)});
    running = 2;
    done = false;
    bool fails = behaviour == "fail3" || (behaviour == "flaky" && attempt == 0);
    if (behaviour == "ok" || behaviour == "flaky") {
      if (!fails) {
        exit_rank(assign.rank_base, env::ExitStatus::exited(0), false);
        exit_rank(assign.rank_base + 1, env::ExitStatus::exited(0), false);
      }
    }
    if (fails) exit_rank(assign.rank_base, env::ExitStatus::exited(3), false);
    if (behaviour == "vanish") boost::asio::post(io, [this] { client.reset(); });  // dies: says nothing
    if (behaviour == "sigterm") ::kill(::getpid(), SIGTERM);                       // the user's kill to sgpu
  }
  void exit_rank(std::uint32_t rank, env::ExitStatus status, bool by_sgpu) {
    client->send(rdzv::RankExited{rank, status, by_sgpu});
    if (--running == 0 && !done) {
      done = true;
      client->send(rdzv::NodeDone{});
    }
  }
  void answer(const rdzv::Inspect& ask) {
    // As an agent answers: "hang" ranks never printed, so their progress is
    // as old as the job; "busy" ranks print all the time.
    rdzv::Inspection reply{ask.id, behaviour == "busy" ? 0U : 3600U * 1000U, ""};
    if (ask.what == rdzv::InspectWhat::Stacks) {
      ++record().stacks_asked;
      nlohmann::json ranks = nlohmann::json::array();
      for (std::uint32_t r = 0; r < 2; ++r) {
        bool odd = behaviour == "stuck" && r == 1;
        nlohmann::json frame = {
            {"name", odd ? "load_batch" : "all_reduce"},
            {"file", odd ? "train.py" : "distributed_c10d.py"},
            {"path", odd ? "/job/train.py" : "/usr/lib/python3/dist-packages/torch/distributed/x.py"},
            {"line", odd ? 12 : 1536}};
        ranks.push_back(
            {{"rank", assign.rank_base + r},
             {"host", name},
             {"pid", 1000 + r},
             {"tool", "py-spy"},
             {"error", nullptr},
             {"threads", {{{"name", "MainThread"}, {"tid", 1000 + r}, {"main", true}, {"frames", {frame}}}}}});
      }
      reply.stacks = ranks.dump();
    }
    client->send(reply);
  }
  void on_message(rdzv::Message&& m) override {
    if (const auto* id = std::get_if<rdzv::PreflightId>(&m)) {
      if (check) check->unique_id(id->id);
      return;
    }
    if (const auto* ask = std::get_if<rdzv::Inspect>(&m)) return answer(*ask);
    if (const auto* again = std::get_if<rdzv::Restart>(&m)) {
      attempt = static_cast<int>(again->attempt);
      return start_ranks();
    }
    if (const auto* finish = std::get_if<rdzv::Finish>(&m)) {
      record().finish_codes.push_back(finish->exit_code);
      client->close();
      return;
    }
    const auto* sig = std::get_if<rdzv::Signal>(&m);
    if (sig == nullptr || sig->mode == rdzv::SignalMode::Forward || done) return;
    // Every rank still running dies of the signal, as a real agent's would.
    bool first_exited = behaviour == "fail3" || (behaviour == "flaky" && attempt == 0);
    for (std::uint32_t r = assign.rank_base + (first_exited ? 1 : 0); r < assign.rank_base + 2; ++r)
      exit_rank(r, env::ExitStatus::killed(sig->signal), true);
  }
  // Aborted by the launcher (a preflight that refuses the launch): the code
  // the agent would exit with, as Finish's.
  void on_lost(const std::string&, int exit_code) override { record().finish_codes.push_back(exit_code); }
};

class FakeBackend : public Backend {
 public:
  void check(LaunchContext& ctx) override {
    if (settings(ctx.spec).nodes.empty())
      throw Error(fmt::format("{}: needs nodes = [\"ok\", ...] in [fake]",
                              where_set(ctx.spec, "resources.backend", "--backend fake")),
                  kExitUsage);
  }
  PlannedLayout describe(const LaunchContext& ctx) override {
    PlannedLayout layout;
    for (std::size_t k = 0; k < settings(ctx.spec).nodes.size(); ++k)
      layout.nodes.push_back({"fake-" + std::to_string(k), std::nullopt});
    return layout;
  }
  BackendRun run(LaunchContext& ctx, const RunStart& run, JobHost& host) override {
    const auto& s = settings(ctx.spec);
    record().run_dir = run.dir;
    if (s.unreachable) throw Error("node fake-0: cannot be reached", 255);
    auto& io = *ctx.io;
    ClusterOptions o;
    o.nnodes = static_cast<int>(s.nodes.size());
    for (int k = 0; k < o.nnodes; ++k) o.node_names.push_back("fake-" + std::to_string(k));
    o.listen = rdzv::Endpoint{"127.0.0.1", 0};
    o.join_timeout = 10s;
    o.notice = [](const std::string&) {};
    o.run = run;
    // What only this backend knows: a vanished node's ending means
    // lost_code; it learns it a moment later, as ssh learns a session's end.
    auto settle_later = std::make_shared<boost::asio::steady_timer>(io);
    o.refine_end = [settle_later, code = s.lost_code](env::JobEnd& end, std::function<void()> settled) {
      if (end.kind != env::JobEnd::Kind::NodeLost) return settled();
      settle_later->expires_after(50ms);
      settle_later->async_wait([&end, settled, code](boost::system::error_code) {
        end.cause_code = code;
        settled();
      });
    };
    ClusterJob job(io, ctx.spec, o, ctx.cwd, host);
    std::vector<std::unique_ptr<FakeNode>> nodes;
    for (int k = 0; k < o.nnodes; ++k) {
      auto node = std::make_unique<FakeNode>(io, ctx.spec, s.nodes[static_cast<std::size_t>(k)],
                                             o.node_names[static_cast<std::size_t>(k)], k);
      node->client = std::make_unique<rdzv::RendezvousClient>(
          io, rdzv::ClientOptions{rdzv::Endpoint{"127.0.0.1", job.port()}, 10s, 10s}, job.secret(), *node);
      node->client->start();
      nodes.push_back(std::move(node));
    }
    return {job.run(), {}};
  }
  void release(int exit_code) override { record().released = exit_code; }
};

}  // namespace

Record& record() {
  static Record r;
  return r;
}

BackendInfo info() {
  return {.name = "fake",
          .flag_name = "fake",
          .can = {.ranks_here = false, .detaches = true},
          .keys = keys,
          .make = []() -> std::unique_ptr<Backend> { return std::make_unique<FakeBackend>(); }};
}

}  // namespace sgpu::launcher::fake
