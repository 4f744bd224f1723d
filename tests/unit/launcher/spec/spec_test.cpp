#include <doctest/doctest.h>

#include <string>

#include "backends/slurm/slurm_settings.hpp"
#include "backends/ssh/ssh_settings.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/spec/spec_load.hpp"

using namespace sgpu::launcher;

namespace {

// The message resolve_spec throws for `toml` (and extra layers), or "" when it accepts it.
std::string error_of(const std::string& toml, std::vector<Layer> more = {}) {
  std::vector<Layer> layers{file_layer(toml, "job.toml")};
  layers.insert(layers.end(), more.begin(), more.end());
  try {
    resolve_spec(layers);
  } catch (const sgpu::Error& e) {
    CHECK(e.exit_code() == 2);
    return e.what();
  }
  return {};
}

ResolvedSpec resolve(const std::vector<Layer>& layers) { return resolve_spec(layers); }

FlagValue flag(const char* key, const char* name, const char* text) { return {find_key(key), name, text, {}}; }

}  // namespace

TEST_CASE("spec: every kind of error names file:line:col and what is valid") {
  struct Row {
    const char* toml;
    const char* message;
  };
  const Row rows[] = {
      {"[job]\nentrypoint = \"x\n", "job.toml:2:16: TOML syntax error: "},
      {"[job]\npyhton = \"/usr/bin/python3\"\n",
       "job.toml:2:1: unknown key 'job.pyhton'; did you mean 'job.python'? Valid keys in [job]: entrypoint, args, "
       "python, module, no_python"},
      {"[resources]\ngpu = 8\n", "job.toml:2:1: unknown key 'resources.gpu'; did you mean 'resources.gpus'?"},
      {"[job]\ngpus = 8\n", "job.toml:2:1: unknown key 'job.gpus'; did you mean 'resources.gpus'?"},
      {"gpus = 8\n",
       "job.toml:1:1: unknown key 'gpus'; did you mean 'resources.gpus'? Valid tables: [job], "
       "[resources], [env], [timeouts], [monitor], [output], [rendezvous], [preflight], [mlflow], [ssh], [slurm]"},
      {"[resourcse]\ngpus = 8\n", "job.toml:1:2: unknown table [resourcse]; did you mean [resources]?"},
      {"[slurm.pools.reserverd]\nqos = \"x\"\n",
       "unknown table [slurm.pools.reserverd]; did you mean "
       "[slurm.pools.reserved]?"},
      {"[resources]\ngpus = \"8\"\n",
       "job.toml:2:8: resources.gpus = \"8\": expected an integer from 1 to 1048576, got a string"},
      {"[resources]\ngpus = 0\n", "job.toml:2:8: resources.gpus = 0: must be between 1 and 1048576"},
      {"[resources]\nnproc = 5000\n", "job.toml:2:9: resources.nproc = 5000: must be between 1 and 4096"},
      {"[resources]\nnproc = \"many\"\n",
       "job.toml:2:9: resources.nproc = \"many\": expected a number of ranks, or gpu, auto, cpu"},
      {"[resources]\ngpu_bind = \"per_rank\"\n",
       "job.toml:2:12: resources.gpu_bind = \"per_rank\": expected one of \"node\", \"per-rank\" (did you mean "
       "\"per-rank\"?)"},
      {"[job]\nmodule = \"yes\"\n", "job.toml:2:10: job.module = \"yes\": expected true or false, got a string"},
      {"[job]\nargs = \"--epochs 3\"\n", "job.toml:2:8: job.args = \"--epochs 3\": expected an array of strings"},
      {"[job]\nargs = [\"--epochs\", 3]\n",
       "job.toml:2:8: job.args = [\"--epochs\", 3]: every item must be a string (write \"3\" in quotes)"},
      {"[timeouts]\ntimeout = \"5x\"\n",
       "job.toml:2:11: timeouts.timeout: invalid duration '5x': unknown unit 'x' (use ms, s, m, h, d)"},
      {"[timeouts]\ntimeout = -5\n",
       "job.toml:2:11: timeouts.timeout = -5: must be a positive number of seconds, or \"none\" for no limit"},
      {"[timeouts]\ngrace = \"none\"\n", "job.toml:2:9: timeouts.grace = \"none\": needs a limit, e.g. 30s"},
      {"[timeouts]\ntimeout = true\n", "timeouts.timeout = true: expected a duration such as \"90m\""},
      {"[env]\nRANK = \"3\"\n",
       "job.toml:2:8: env.RANK = \"3\": sgpu sets RANK itself for every rank; it cannot be set in [env]"},
      {"[env]\n\"1BAD\" = \"x\"\n", "env.1BAD = \"x\": '1BAD' is not a variable name"},
      {"[env]\nDEBUG = true\n",
       "job.toml:2:9: env.DEBUG = true: expected a string or an integer, got a boolean; "
       "write it in quotes"},
      {"env = \"A=1\"\n", "job.toml:1:1: env must be a table"},
      {"ssh = 3\n", "job.toml:1:1: ssh is a table ([ssh]), not a value"},
      {"[ssh]\nport = 70000\n", "job.toml:2:8: ssh.port = 70000: must be between 1 and 65535"},
      {"[resources]\nnodes = 0\n", "resources.nodes = 0: must be between 1 and 65536"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.toml);
    CHECK(error_of(row.toml).find(row.message) != std::string::npos);
  }
}

TEST_CASE("spec: contradictions name both settings") {
  struct Row {
    const char* toml;
    const char* message;
  };
  const Row rows[] = {
      {"[resources]\ngpus = 8\nnproc = 2\n",
       "job.toml:2:8: resources.gpus and resources.nproc (job.toml:3:9) exclude each other: gpus starts one rank per "
       "GPU, nproc starts CPU ranks"},
      {"[job]\nmodule = true\nno_python = true\n",
       "job.toml:2:10: job.module and job.no_python (job.toml:3:13) exclude "
       "each other"},
      {"[resources]\nnodes = 2\ngpus = 8\ngpus_per_node = 8\n",
       "job.toml:3:8: resources.gpus and resources.gpus_per_node (job.toml:4:17) disagree: 2 nodes x 8 GPUs is 16, not "
       "8"},
      {"[resources]\nnodes = 3\ngpus = 8\n",
       "job.toml:3:8: resources.gpus = 8: 8 GPUs do not split evenly over 3 nodes (resources.nodes (job.toml:2:9))"},
      {"[rendezvous]\nnode_rank = 1\n",
       "job.toml:2:13: rendezvous.node_rank = 1: must be below the number of nodes, 1"},
      {"[resources]\nnproc = 2\ngpu_type = \"H100\"\n",
       "job.toml:3:12: resources.gpu_type = \"H100\" needs --gpus N (resources.gpus): with resources.nproc "
       "(job.toml:2:9) the ranks run on CPUs"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.toml);
    CHECK(error_of(row.toml).find(row.message) != std::string::npos);
  }
}

TEST_CASE("spec: all errors at once, in file order") {
  auto msg = error_of("[resources]\ngpus = 0\n[timeouts]\ntimeout = \"x\"\n[job]\nentrypont = \"a\"\n");
  CHECK(msg.starts_with("3 problems in the job spec:\n  job.toml:2:8: "));
  CHECK(msg.find("\n  job.toml:4:11: ") != std::string::npos);
  CHECK(msg.find("\n  job.toml:6:1: unknown key 'job.entrypont'; did you mean 'job.entrypoint'?") != std::string::npos);
}

TEST_CASE("spec: a valid file fills the JobSpec") {
  auto r = resolve({file_layer(R"(
[job]
entrypoint = "train.py"
args = ["--epochs", "3"]
module = true
[resources]
gpus = 8
gpu_type = "h100"
gpu_bind = "per-rank"
[env]
NCCL_DEBUG = "WARN"
OMP_NUM_THREADS = 4
[timeouts]
timeout = 02:30:00
grace = 45
[output]
format = "json"
[rendezvous]
master_port = 29500
[slurm.pools.reserved]
partition = "gpu-res"
)",
                               "job.toml")});
  const auto& s = r.spec;
  CHECK(s.entrypoint.target == "train.py");
  CHECK(s.entrypoint.args == std::vector<std::string>{"--epochs", "3"});
  CHECK(s.entrypoint.kind == sgpu::env::Entrypoint::Kind::Module);
  CHECK(s.gpus == 8);
  CHECK(s.gpu_type == "h100");
  CHECK(s.gpu_bind == GpuBind::PerRank);
  CHECK(s.env.at("NCCL_DEBUG") == "WARN");
  CHECK(s.env.at("OMP_NUM_THREADS") == "4");
  CHECK(s.timeout == "2h30m0s");
  CHECK(s.grace == "45");
  CHECK(s.output_format == "json");
  CHECK(s.master_port == 29500);
  CHECK(sgpu::launcher::slurm::settings(s).reserved_partition == "gpu-res");
  CHECK(s.origins.at("resources.gpus") == "job.toml:7:8: resources.gpus = 8");
  // [slurm] is set but the backend is local: said, not dropped silently.
  REQUIRE(r.notes.size() == 1);
  CHECK(r.notes[0] == "slurm.pools.reserved.partition (job.toml:21:13) is not used: the backend is local, not slurm");
}

TEST_CASE("spec: precedence is file < environment < flags < --set") {
  auto file = file_layer("[job]\npython = \"/file\"\n[resources]\ngpus = 8\n", "job.toml");
  auto environment = environment_layer({{"SGPU_PYTHON", "/env"}, {"SGPU_POOL", "on-demand"}, {"UNRELATED", "x"}});
  auto flags = command_line_layer({flag("job.python", "--python", "/flag")}, {});
  auto sets = set_layer({"job.python=/set"});

  CHECK(resolve({file}).spec.python == "/file");
  CHECK(resolve({file, environment}).spec.python == "/env");
  CHECK(resolve({file, environment, flags}).spec.python == "/flag");
  auto all = resolve({file, environment, flags, sets});
  CHECK(all.spec.python == "/set");
  CHECK(all.spec.origins.at("job.python") == "--set job.python=/set");
  CHECK(sgpu::launcher::slurm::settings(all.spec).pool == "on-demand");
  CHECK(all.spec.origins.at("slurm.pool") == "SGPU_POOL=on-demand");
  CHECK(resolve({file, environment, flags}).spec.origins.at("job.python") == "--python /flag");
  // An empty variable is no setting.
  CHECK(environment_layer({{"SGPU_PYTHON", ""}}).settings.empty());
}

TEST_CASE("spec: one side of an exclusive pair replaces the other from lower layers") {
  auto file = file_layer("[job]\nmodule = true\n[resources]\ngpus = 8\ngpus_per_node = 8\n", "job.toml");
  SUBCASE("--nproc overrides the file's GPUs") {
    auto r = resolve({file, command_line_layer({flag("resources.nproc", "--nproc", "2")}, {})});
    CHECK(r.spec.nproc == 2);
    CHECK_FALSE(r.spec.gpus);
    CHECK_FALSE(r.spec.gpus_per_node);
  }
  SUBCASE("--set resources.gpus overrides --nproc") {
    auto r =
        resolve({command_line_layer({flag("resources.nproc", "--nproc", "2")}, {}), set_layer({"resources.gpus=4"})});
    CHECK(r.spec.gpus == 4);
    CHECK_FALSE(r.spec.nproc);
  }
  SUBCASE("--no-python overrides module = true; --set job.module=false does not undo no_python") {
    auto flags = command_line_layer({flag("job.no_python", "--no-python", "true")}, {});
    CHECK(resolve({file, flags}).spec.entrypoint.kind == sgpu::env::Entrypoint::Kind::Executable);
    auto r = resolve({file, flags, set_layer({"job.module=false"})});
    CHECK(r.spec.entrypoint.kind == sgpu::env::Entrypoint::Kind::Executable);
  }
  SUBCASE("both sides on the command line are a contradiction") {
    auto flags =
        command_line_layer({flag("resources.gpus", "--gpus", "2"), flag("resources.nproc", "--nproc", "2")}, {});
    CHECK_THROWS_WITH_AS(resolve({flags}), doctest::Contains("--gpus and --nproc exclude each other"), sgpu::Error);
  }
}

TEST_CASE("spec: the command line's entrypoint replaces the file's, arguments and all") {
  auto file = file_layer("[job]\nentrypoint = \"train.py\"\nargs = [\"--epochs\", \"3\"]\n", "job.toml");
  auto r = resolve({file, command_line_layer({}, {"eval.py", "--fast"})});
  CHECK(r.spec.entrypoint.target == "eval.py");
  CHECK(r.spec.entrypoint.args == std::vector<std::string>{"--fast"});
  CHECK(resolve({file, set_layer({"job.args=[\"--epochs\", \"1\"]"})}).spec.entrypoint.args ==
        std::vector<std::string>{"--epochs", "1"});
}

TEST_CASE("spec: --set reads the value as the key's type") {
  auto r = resolve({set_layer({"resources.nproc=3", "job.args=a,b c", "env.NCCL_DEBUG=INFO", "timeouts.timeout=90m",
                               "job.python='/opt/py 3/bin/python'", "ssh.hosts=[\"a:8\", \"b:8\"]",
                               "resources.nodes=2:2", "ssh.ship_sgpu=true"})});
  CHECK(r.spec.nproc == 3);
  CHECK(r.spec.entrypoint.args == std::vector<std::string>{"a", "b c"});
  CHECK(r.spec.env.at("NCCL_DEBUG") == "INFO");
  CHECK(r.spec.timeout == "90m");
  CHECK(r.spec.python == "/opt/py 3/bin/python");
  CHECK(sgpu::launcher::ssh::settings(r.spec).hosts == std::vector<std::string>{"a:8", "b:8"});
  CHECK(r.spec.nodes == 2);
  CHECK(sgpu::launcher::ssh::settings(r.spec).ship_sgpu);

  struct Row {
    const char* set;
    const char* message;
  };
  const Row rows[] = {
      {"resources.gpus", "--set resources.gpus: expected path.to.key=value, e.g. --set resources.gpus=8"},
      {"resources.gpu=8", "--set resources.gpu=8: unknown key 'resources.gpu'; did you mean 'resources.gpus'?"},
      {"resources=8", "--set resources=8: resources is a table; set one of its keys"},
      {"env=A", "--set env=A: env is a table; set one of its keys, e.g. --set env.NAME=value"},
      {"resources.gpus=eight", "--set resources.gpus=eight: expected an integer from 1 to 1048576"},
      {"resources.gpus=0", "--set resources.gpus=0: must be between 1 and 1048576"},
      {"resources.nodes=1:4", "--set resources.nodes=1:4: elastic node ranges are not supported"},
      {"job.module=maybe", "--set job.module=maybe: expected true or false"},
      {"job.args=[1]", "--set job.args=[1]: every item must be a string"},
      {"job.python=\"unterminated", "--set job.python=\"unterminated: not a TOML value: "},
      {"timeouts.grace=none", "--set timeouts.grace=none: needs a limit"},
      {"env.MASTER_PORT=1", "--set env.MASTER_PORT=1: sgpu sets MASTER_PORT itself"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.set);
    CHECK_THROWS_WITH_AS(resolve({set_layer({row.set})}), doctest::Contains(row.message), sgpu::Error);
  }
}

TEST_CASE("spec: flags and variables are checked like file values") {
  CHECK_THROWS_WITH_AS(resolve({command_line_layer({flag("resources.nproc", "--nproc", "0")}, {})}),
                       doctest::Contains("--nproc 0: must be between 1 and 4096"), sgpu::Error);
  CHECK_THROWS_WITH_AS(resolve({command_line_layer({flag("resources.gpu_bind", "--gpu-bind", "rank")}, {})}),
                       doctest::Contains("--gpu-bind rank: expected one of \"node\", \"per-rank\""), sgpu::Error);
  CHECK_THROWS_WITH_AS(resolve({command_line_layer({flag("timeouts.timeout", "--timeout", "5x")}, {})}),
                       doctest::Contains("--timeout: invalid duration '5x'"), sgpu::Error);
  CHECK_THROWS_WITH_AS(resolve({environment_layer({{"SGPU_POOL", "spot"}})}),
                       doctest::Contains("SGPU_POOL=spot: expected one of \"reserved\", \"on-demand\""), sgpu::Error);
  CHECK(resolve({command_line_layer({flag("resources.nproc", "--nproc", "auto")}, {})}).spec.nproc_mode == "auto");
}

TEST_CASE("spec: every schema row is reachable and documented") {
  for (const auto& key : spec_keys()) {
    CAPTURE(key.path);
    CHECK(find_key(key.path) == &key);
    CHECK(static_cast<bool>(key.apply));
    if (!key.flags.empty()) CHECK_FALSE(key.help.empty());
  }
  CHECK(find_key("env.ANYTHING") == find_key("env"));
  CHECK(find_key("resources") == nullptr);
  CHECK(is_spec_table("slurm.pools"));
  CHECK_FALSE(is_spec_table("resources.gpus"));
}
