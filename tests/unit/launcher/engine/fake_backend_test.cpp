// The launch engine driven through a backend registered here: its nodes are
// fakes that speak the real rendezvous protocol over loopback, with no
// process anywhere. What they do (exit 0, fail, hang, vanish) checks the one
// job-control policy and the one exit code end to end: summary.json says
// what sgpu returns.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/backend.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/launcher/launch.hpp"
#include "sgpu/launcher/spec/spec_load.hpp"
#include "unit/backends/fake/fake_backend.hpp"

using namespace sgpu::launcher;
namespace rdzv = sgpu::rendezvous;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// The backend's one registry line, before its first spec is read.
const bool kRegistered = (register_backend(fake::info()), true);

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
  nlohmann::json preflight;  // <run dir>/preflight.json, where the run wrote one
  double seconds = 0;
};

// A spec as `sgpu launch --backend fake --set ...` makes it: through the
// schema, where the backend's own table was registered.
LaunchRequest fake_request(const std::vector<std::string>& sets, const fs::path& root) {
  std::vector<std::string> all = {"resources.backend=fake", "job.entrypoint=fake-program", "job.no_python=true",
                                  "timeouts.grace=5s", "output.log_dir=" + root.string()};
  all.insert(all.end(), sets.begin(), sets.end());
  LaunchRequest req;
  req.resolved = resolve_spec({set_layer(all)});
  req.cwd = fs::current_path().string();
  req.inherited = sgpu::env::current_environment();  // as main() gives it: the preflight's workers see it
  return req;
}

nlohmann::json read_json(const fs::path& root, const char* name) {
  nlohmann::json read;
  for (const auto& dir : fs::directory_iterator(root)) {
    std::ifstream s(dir.path() / name);
    if (s) read = nlohmann::json::parse(s);
  }
  return read;
}

Run launch_with(const std::vector<std::string>& sets) {
  CHECK(kRegistered);
  fake::record() = {};
  auto root = fs::temp_directory_path() / ("sgpu-fake-" + std::to_string(::getpid()));
  auto req = fake_request(sets, root);
  Run run;
  auto t0 = std::chrono::steady_clock::now();
  {
    Quiet quiet;
    std::signal(SIGPIPE, SIG_IGN);
    try {
      run.code = launch(req);
    } catch (const sgpu::Error& e) {
      run.code = e.exit_code();
    }
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.summary = read_json(root, "summary.json");
  run.preflight = read_json(root, "preflight.json");
  fs::remove_all(root);
  return run;
}

Run launch_fake(const std::string& nodes, const std::string& timeout = "1m", const std::string& hang_timeout = "none") {
  return launch_with({"fake.nodes=" + nodes, "timeouts.timeout=" + timeout, "timeouts.hang_timeout=" + hang_timeout});
}

}  // namespace

TEST_CASE("engine: a registered backend runs jobs with one job control and one exit code") {
  SUBCASE("every rank exits 0") {
    auto run = launch_fake("ok,ok");
    CHECK(run.code == 0);
    CHECK(run.summary["exit_code"] == 0);
    CHECK(run.summary["status"] == "completed");
    CHECK(fake::record().released == 0);
  }
  SUBCASE("fail-fast: the first failure stops every node and its code is sgpu's") {
    auto run = launch_fake("hang,fail3");
    CHECK(run.code == 3);
    CHECK(fake::record().finish_codes == std::vector<int>{3, 3});
    CHECK(run.summary["exit_code"] == 3);
    CHECK(run.summary["status"] == "rank_failed");
    CHECK(run.summary["root_cause"]["rank"] == 2);
    CHECK(run.summary["ranks"][0]["verdict"] == "terminated_by_sgpu");
    CHECK(fake::record().released == 3);
  }
  SUBCASE("the timeout ends a hung job with 124, on time") {
    auto run = launch_fake("hang,hang", "1");
    CHECK(run.code == 124);
    CHECK(run.summary["exit_code"] == 124);
    CHECK(run.summary["status"] == "timed_out");
    CHECK(run.seconds < 5);
    CHECK(fake::record().stacks_asked == 2);  // every node was asked where its ranks were before they were stopped
    CHECK(run.summary["root_cause"]["message"].get<std::string>().find("every rank is at the same place") !=
          std::string::npos);
  }
  SUBCASE("--hang-timeout: no progress on any node ends the job as hung, naming the stuck rank and its node") {
    auto run = launch_fake("hang,stuck", "1m", "1s");
    CHECK(run.code == 124);
    CHECK(fake::record().finish_codes == std::vector<int>{124, 124});
    CHECK(run.summary["status"] == "hung");
    auto message = run.summary["root_cause"]["message"].get<std::string>();
    CHECK(message.find("no rank made progress for 1s") != std::string::npos);
    CHECK(message.find("rank 3 on fake-1 (pid 1001) at train.py:12 in load_batch") != std::string::npos);
    CHECK(run.seconds < 5);
  }
  SUBCASE("--hang-timeout: a node whose ranks make progress keeps the job going") {
    auto run = launch_fake("busy,busy", "2", "1s");
    CHECK(run.code == 124);
    CHECK(run.summary["status"] == "timed_out");  // the timeout ended it, not the hang check
  }
  SUBCASE("a lost node ends the job; the backend's word on it is the exit code, the agents' too") {
    auto run = launch_fake("hang,vanish");
    CHECK(run.code == 77);
    CHECK(fake::record().finish_codes == std::vector<int>{77});  // the node left heard the explained code, not 1
    CHECK(run.summary["exit_code"] == 77);
    CHECK(run.summary["status"] == "node_lost");
    CHECK(run.summary["root_cause"]["message"].get<std::string>().find("fake-1") != std::string::npos);
    CHECK(fake::record().released == 77);
  }
}

TEST_CASE("engine: a new backend's own settings, restarts, signals, a failed start and the preflight") {
  SUBCASE("its [fake] table is in the schema, marked as its own, and typed by it") {
    const KeyInfo* key = find_key("fake.lost_code");
    REQUIRE(key != nullptr);
    CHECK(key->backend == "fake");
    auto req = fake_request({"fake.nodes=ok,vanish", "fake.lost_code=9"}, "/nonexistent");
    CHECK(req.resolved.spec.backend_settings.get<fake::Settings>().nodes == std::vector<std::string>{"ok", "vanish"});
    CHECK_THROWS_WITH_AS(fake_request({"fake.lost_code=0"}, "/nonexistent"), doctest::Contains("fake.lost_code"),
                         sgpu::Error);
    CHECK_THROWS_WITH_AS(fake_request({"fake.node=ok"}, "/nonexistent"), doctest::Contains("fake.nodes"), sgpu::Error);
  }
  SUBCASE("its own setting decides the code of a lost node") {
    auto run = launch_with({"fake.nodes=hang,vanish", "fake.lost_code=9"});
    CHECK(run.code == 9);
    CHECK(fake::record().finish_codes == std::vector<int>{9});
  }
  SUBCASE("a failed attempt restarts every node, and the second attempt's end is the run's") {
    auto run = launch_with({"fake.nodes=flaky,ok", "job.max_restarts=1", "job.restart_backoff=0.01s"});
    CHECK(run.code == 0);
    CHECK(fake::record().attempts_started == 4);
    CHECK(run.summary["status"] == "completed");
    CHECK(run.summary["attempts"].size() == 2);
    CHECK(fake::record().finish_codes == std::vector<int>{0, 0});
  }
  SUBCASE("a signal to sgpu stops every node; 128+N is every node's code and sgpu's") {
    // Node 1 stands for the user: SIGTERM to sgpu once its ranks started.
    auto run = launch_with({"fake.nodes=hang,sigterm"});
    CHECK(run.code == 143);
    CHECK(fake::record().finish_codes == std::vector<int>{143, 143});
    CHECK(run.summary["exit_code"] == 143);
  }
  SUBCASE("a backend that fails before any node starts: its code, a not-started summary in the engine's run") {
    auto run = launch_with({"fake.nodes=ok", "fake.unreachable=true"});
    CHECK(run.code == 255);
    CHECK(fake::record().released == 255);
    REQUIRE(fake::record().run_dir.has_value());  // the engine made the run before the backend ran
    CHECK(run.summary["status"] == "not_started");
    CHECK(run.summary["exit_code"] == 255);
    CHECK(fake::record().attempts_started == 0);
  }
}

// ctest runs this case twice: as part of the whole suite, on this machine's
// driver library (none here: each node reports no driver at once), and as
// `unit_fake_driver`, with the fake driver libraries first on
// LD_LIBRARY_PATH (README "Test hooks") so every node's workers see two
// GPUs and all-reduce over the fake NCCL: the healthy verdict, end to end.
TEST_CASE("engine: --preflight-only through a new backend checks every node's GPUs and starts no rank") {
  bool fake_driver = std::getenv("SGPU_FAKE_DRIVER_GPUS") != nullptr;  // NOLINT(concurrency-mt-unsafe)
  auto run = launch_with({"fake.nodes=ok,ok", "preflight.only=true", "preflight.iters=2", "preflight.max_bytes=64K",
                          "preflight.timeout=20s"});
  if (fake_driver) {
    CHECK(run.code == 0);
    REQUIRE(run.preflight.is_object());
    CHECK(run.preflight["status"] == "healthy");
    std::set<std::string> nodes;
    for (const auto& g : run.preflight["gpus"]) nodes.insert(g["node"].get<std::string>());
    CHECK(run.preflight["gpus"].size() == 4);  // two on each node, every one checked
    CHECK(nodes.size() == 2);
    CHECK(run.preflight["allreduce"]["sizes"][0]["rank_time_us"].size() == 4);  // one all-reduce across both nodes
  } else {
    // Whatever this machine's driver says of its GPUs (3, unavailable, without one).
    CHECK((run.code == 0 || run.code == 1 || run.code == 3));
  }
  // Every node hears the verdict's code, which is sgpu's.
  CHECK(fake::record().finish_codes == std::vector<int>{run.code, run.code});
  CHECK(fake::record().attempts_started == 0);
  CHECK(fake::record().released == run.code);
  CHECK(run.summary["status"] == "not_started");
}

TEST_CASE("engine: a new backend that declares it detaches runs in the background with no engine change") {
  REQUIRE(kRegistered);
  auto root = fs::temp_directory_path() / ("sgpu-fake-detach-" + std::to_string(::getpid()));
  auto req = fake_request({"fake.nodes=ok,ok", "output.detach=true", "timeouts.timeout=1m"}, root);
  // The detached run is a grandchild of this process: made our child as a
  // subreaper, so its end is seen here.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) {
    Quiet quiet;
    int code = 1;
    try {
      code = launch(req);  // the caller's side exits 0 inside, once the run is listed
    } catch (...) {
    }
    ::_exit(code);  // the background run's own end
  }
  int status = 0;
  REQUIRE(::waitpid(launcher, &status, 0) == launcher);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  int run_status = 0;
  pid_t run = ::waitpid(-1, &run_status, 0);  // the background run
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  CHECK(run > 0);
  CHECK(run != launcher);
  CHECK(WIFEXITED(run_status));
  CHECK(WEXITSTATUS(run_status) == 0);
  auto summary = read_json(root, "summary.json");
  CHECK(summary["status"] == "completed");
  fs::remove_all(root);
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
