// The launch engine driven through a backend registered here: its nodes are
// fakes that speak the real rendezvous protocol over loopback, with no
// process anywhere. What they do (exit 0, fail, hang, vanish) checks the one
// job-control policy and the one exit code end to end: summary.json says
// what sgpu returns.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/backend.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/launcher/launch.hpp"
#include "sgpu/rendezvous/client.hpp"

using namespace sgpu::launcher;
namespace rdzv = sgpu::rendezvous;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

std::vector<int> finish_codes;  // every Finish the fake nodes got: their agents' exit codes
int stacks_asked = 0;           // Inspect{Stacks} the fake nodes got

// One fake node: two ranks that do what `behaviour` says once the job starts.
struct FakeNode : rdzv::ClientHandler {
  boost::asio::io_context& io;
  std::string behaviour;  // "ok", "fail3", "hang", "vanish"
  std::string name;
  int node_rank;
  std::unique_ptr<rdzv::RendezvousClient> client;
  rdzv::Assign assign;
  int running = 0;
  bool done = false;

  FakeNode(boost::asio::io_context& io_, std::string b, std::string n, int k)
      : io(io_), behaviour(std::move(b)), name(std::move(n)), node_rank(k) {}

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
    return rdzv::Ready{a.node_rank == 0 ? 29500U : 0U, ""};  // node 0 names MASTER_PORT (nothing listens: no rank runs)
  }
  void on_start(const rdzv::Start&) override {
    for (std::uint32_t r = 0; r < 2; ++r)
      client->send(rdzv::RankStarted{assign.rank_base + r, 1000 + static_cast<int>(r)});
    running = 2;
    if (behaviour == "ok") {
      exit_rank(assign.rank_base, sgpu::env::ExitStatus::exited(0), false);
      exit_rank(assign.rank_base + 1, sgpu::env::ExitStatus::exited(0), false);
    } else if (behaviour == "fail3") {
      exit_rank(assign.rank_base, sgpu::env::ExitStatus::exited(3), false);
    } else if (behaviour == "vanish") {
      // The node's agent dies: its connection closes with nothing said.
      boost::asio::post(io, [this] { client.reset(); });
    }
  }
  void exit_rank(std::uint32_t rank, sgpu::env::ExitStatus status, bool by_sgpu) {
    client->send(rdzv::RankExited{rank, status, by_sgpu});
    if (--running == 0 && !done) {
      done = true;
      client->send(rdzv::NodeDone{});
    }
  }
  void on_message(rdzv::Message&& m) override {
    if (const auto* ask = std::get_if<rdzv::Inspect>(&m)) {
      // As an agent answers: its ranks never printed ("hang"), so their
      // progress is as old as the job; "busy" ranks print all the time.
      rdzv::Inspection answer{ask->id, behaviour == "busy" ? 0U : 3600U * 1000U, ""};
      if (ask->what == rdzv::InspectWhat::Stacks) {
        ++stacks_asked;
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
        answer.stacks = ranks.dump();
      }
      client->send(answer);
      return;
    }
    if (const auto* finish = std::get_if<rdzv::Finish>(&m)) {
      finish_codes.push_back(finish->exit_code);  // the code this node's agent would exit with
      client->close();
      return;
    }
    const auto* sig = std::get_if<rdzv::Signal>(&m);
    if (sig == nullptr || sig->mode == rdzv::SignalMode::Forward || done) return;
    // Every rank still running dies of the signal, as a real agent's would.
    for (std::uint32_t r = assign.rank_base + (behaviour == "fail3" ? 1 : 0); r < assign.rank_base + 2; ++r)
      exit_rank(r, sgpu::env::ExitStatus::killed(sig->signal), true);
  }
  void on_lost(const std::string&, int) override {}
};

std::vector<std::string> g_behaviours;  // what the fake backend's nodes do, by node rank

class FakeBackend : public Backend {
 public:
  void check(LaunchContext&) override {}
  PlannedLayout describe(const LaunchContext&) override { return {{{"fake-0", std::nullopt}}, "", {}}; }
  BackendRun run(LaunchContext& ctx, const ObserverFactory& observe) override {
    auto& io = *ctx.io;
    ClusterOptions o;
    o.nnodes = static_cast<int>(g_behaviours.size());
    for (int k = 0; k < o.nnodes; ++k) o.node_names.push_back("fake-" + std::to_string(k));
    o.listen = rdzv::Endpoint{"127.0.0.1", 0};
    o.join_timeout = 10s;
    o.notice = [](const std::string&) {};
    // What only this backend knows: a vanished node's ending means 77; it
    // learns it a moment later, as ssh learns a session's end.
    auto settle_later = std::make_shared<boost::asio::steady_timer>(io);
    o.refine_end = [settle_later](sgpu::env::JobEnd& end, std::function<void()> settled) {
      if (end.kind != sgpu::env::JobEnd::Kind::NodeLost) return settled();
      settle_later->expires_after(50ms);
      settle_later->async_wait([&end, settled](boost::system::error_code) {
        end.cause_code = 77;
        settled();
      });
    };
    ClusterJob job(io, ctx.spec, o, ctx.inherited, ctx.cwd);
    ctx.run_id = job.run_id();
    ctx.run_dir = job.run_dir();
    std::vector<std::unique_ptr<FakeNode>> nodes;
    for (int k = 0; k < o.nnodes; ++k) {
      auto node = std::make_unique<FakeNode>(io, g_behaviours[static_cast<std::size_t>(k)], o.node_names[k], k);
      node->client = std::make_unique<rdzv::RendezvousClient>(
          io, rdzv::ClientOptions{rdzv::Endpoint{"127.0.0.1", job.port()}, 10s, 10s}, job.secret(), *node);
      node->client->start();
      nodes.push_back(std::move(node));
    }
    return {job.run(observe), {}};
  }
  void release(int exit_code) override { released = exit_code; }
  static inline std::optional<int> released;
};

// The engine prints the console and the report; the test reads summary.json.
struct Quiet {
  int out = ::dup(1), err = ::dup(2);
  Quiet() {
    int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::close(null);
  }
  ~Quiet() {
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::close(out);
    ::close(err);
  }
};

struct Run {
  int code = -1;
  nlohmann::json summary;
  double seconds = 0;
};

Run launch_fake(std::vector<std::string> behaviours, const std::string& timeout = "1m",
                const std::string& hang_timeout = "none") {
  static bool registered = false;
  if (!registered) {
    register_backend({.name = "fake", .flag_name = "fake", .make = []() -> std::unique_ptr<Backend> {
                        return std::make_unique<FakeBackend>();
                      }});
    registered = true;
  }
  g_behaviours = std::move(behaviours);
  finish_codes.clear();
  stacks_asked = 0;
  auto root = fs::temp_directory_path() / ("sgpu-fake-" + std::to_string(::getpid()));
  LaunchRequest req;
  req.resolved.spec.entrypoint = {sgpu::env::Entrypoint::Kind::Executable, "fake-program", {}};
  req.resolved.spec.backend = "fake";
  req.resolved.spec.origins["resources.backend"] = "--backend fake";
  req.resolved.spec.timeout = timeout;
  req.resolved.spec.hang_timeout = hang_timeout;
  req.resolved.spec.grace = "5s";
  req.resolved.spec.log_dir = root.string();
  req.cwd = fs::current_path().string();
  FakeBackend::released.reset();
  Run run;
  auto t0 = std::chrono::steady_clock::now();
  {
    Quiet quiet;
    std::signal(SIGPIPE, SIG_IGN);
    run.code = launch(req);
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& dir : fs::directory_iterator(root)) {
    std::ifstream s(dir.path() / "summary.json");
    if (s) run.summary = nlohmann::json::parse(s);
  }
  fs::remove_all(root);
  return run;
}

}  // namespace

TEST_CASE("engine: a registered backend runs jobs with one job control and one exit code") {
  SUBCASE("every rank exits 0") {
    auto run = launch_fake({"ok", "ok"});
    CHECK(run.code == 0);
    CHECK(run.summary["exit_code"] == 0);
    CHECK(run.summary["status"] == "completed");
    CHECK(FakeBackend::released == 0);
  }
  SUBCASE("fail-fast: the first failure stops every node and its code is sgpu's") {
    auto run = launch_fake({"hang", "fail3"});
    CHECK(run.code == 3);
    CHECK(finish_codes == std::vector<int>{3, 3});
    CHECK(run.summary["exit_code"] == 3);
    CHECK(run.summary["status"] == "rank_failed");
    CHECK(run.summary["root_cause"]["rank"] == 2);
    CHECK(run.summary["ranks"][0]["verdict"] == "terminated_by_sgpu");
    CHECK(FakeBackend::released == 3);
  }
  SUBCASE("the timeout ends a hung job with 124, on time") {
    auto run = launch_fake({"hang", "hang"}, "1");
    CHECK(run.code == 124);
    CHECK(run.summary["exit_code"] == 124);
    CHECK(run.summary["status"] == "timed_out");
    CHECK(run.seconds < 5);
    CHECK(stacks_asked == 2);  // every node was asked where its ranks were before they were stopped
    CHECK(run.summary["root_cause"]["message"].get<std::string>().find("every rank is at the same place") !=
          std::string::npos);
  }
  SUBCASE("--hang-timeout: no progress on any node ends the job as hung, naming the stuck rank and its node") {
    auto run = launch_fake({"hang", "stuck"}, "1m", "1s");
    CHECK(run.code == 124);
    CHECK(finish_codes == std::vector<int>{124, 124});
    CHECK(run.summary["status"] == "hung");
    auto message = run.summary["root_cause"]["message"].get<std::string>();
    CHECK(message.find("no rank made progress for 1s") != std::string::npos);
    CHECK(message.find("rank 3 on fake-1 (pid 1001) at train.py:12 in load_batch") != std::string::npos);
    CHECK(run.seconds < 5);
  }
  SUBCASE("--hang-timeout: a node whose ranks make progress keeps the job going") {
    auto run = launch_fake({"busy", "busy"}, "2", "1s");
    CHECK(run.code == 124);
    CHECK(run.summary["status"] == "timed_out");  // the timeout ended it, not the hang check
  }
  SUBCASE("a lost node ends the job; the backend's word on it is the exit code, the agents' too") {
    auto run = launch_fake({"hang", "vanish"});
    CHECK(run.code == 77);
    CHECK(finish_codes == std::vector<int>{77});  // the node left heard the explained code, not 1
    CHECK(run.summary["exit_code"] == 77);
    CHECK(run.summary["status"] == "node_lost");
    CHECK(run.summary["root_cause"]["message"].get<std::string>().find("fake-1") != std::string::npos);
    CHECK(FakeBackend::released == 77);
  }
}

TEST_CASE("engine: choose_backend") {
  auto spec_with = [](const char* backend, bool named) {
    JobSpec s;
    s.backend = backend;
    if (named) s.origins["resources.backend"] = std::string("--backend ") + backend;
    return s;
  };
  sgpu::env::Environment plain;
  sgpu::env::Environment in_slurm{{"SLURM_JOB_ID", "42"}};
  CHECK(choose_backend(spec_with("local", false), plain).name == "local");
  CHECK(choose_backend(spec_with("local", false), in_slurm).name == "slurm");
  CHECK(choose_backend(spec_with("local", true), in_slurm).name == "local");
  CHECK(choose_backend(spec_with("ssh", true), in_slurm).name == "ssh");
  auto multi = spec_with("local", false);
  multi.nodes = 2;
  multi.rendezvous.node_rank = 1;
  CHECK(choose_backend(multi, plain).name == "static");
  CHECK(choose_backend(multi, in_slurm).name == "static");  // a static launch inside an allocation stays static
  CHECK_THROWS_WITH_AS(choose_backend(spec_with("k8s", true), plain),
                       doctest::Contains("no such backend (valid: local"), sgpu::Error);
  // Each backend's table is in the schema, marked as its own.
  bool ssh_key = false;
  for (const auto& k : spec_keys())
    if (k.path == "ssh.hosts") ssh_key = k.backend == "ssh";
  CHECK(ssh_key);
}
