#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/ssh/env_ship.hpp"
#include "backends/ssh/env_sync.hpp"
#include "sgpu/env/error.hpp"

using namespace sgpu::launcher::ssh;

namespace {

const char* kLock = R"({"version": "3.11.2", "minor": "3.11", "implementation": "cpython", "platform": "linux-x86_64",
  "venv": true, "system_site": true, "uv": "",
  "packages": [
    {"name": "torchvision", "version": "0.16", "key": "00112233445566aa", "wheel": "00112233445566aa/t-0.16-cp311-cp311-linux_x86_64.whl", "bytes": 1000},
    {"name": "demo-dep", "version": "1.0", "key": "0123456789abcdef", "wheel": "0123456789abcdef/demo_dep-1.0-py3-none-any.whl", "bytes": 10},
    {"name": "localpkg", "version": "0.1", "key": "fedcba9876543210", "wheel": "", "editable": true, "source": "/src/l"}],
  "system": {"torch": "2.1.2", "numpy": "1.24.2"}, "skipped": []})";

NodeProbe probe_like(const EnvLock& lock) {
  NodeProbe p;
  p.home = "/home/u";
  p.python = "/usr/bin/python3.11";
  p.implementation = "cpython";
  p.platform = lock.platform;
  p.system = lock.system;
  return p;
}

}  // namespace

TEST_CASE("ssh::parse_env_lock reads the inspection, sorts packages by name and hashes the lock") {
  auto lock = parse_env_lock(kLock, "/v/bin/python");
  CHECK(lock.minor == "3.11");
  CHECK(lock.system_site);
  REQUIRE(lock.packages.size() == 3);
  CHECK(lock.packages[0].name == "demo-dep");
  CHECK(lock.packages[1].editable);
  CHECK(lock.packages[1].source == "/src/l");
  CHECK(lock.packages[2].bytes == 1000);
  CHECK(lock.hash.size() == 16);
  CHECK(lock_text(lock) ==
        "python cpython 3.11\nplatform linux-x86_64\nsystem-site-packages true\n"
        "demo-dep 1.0 0123456789abcdef\nlocalpkg 0.1 fedcba9876543210\ntorchvision 0.16 00112233445566aa\n");

  SUBCASE("the hash follows what a node's copy is made of, and nothing else") {
    auto same = parse_env_lock(kLock, "/elsewhere/python");
    CHECK(same.hash == lock.hash);  // where the interpreter is, the system's packages: not in the copy
    auto other = lock;
    other.packages[0].key = "0123456789abcdee";
    CHECK(lock_hash(other) != lock.hash);
    other = lock;
    other.system_site = false;
    CHECK(lock_hash(other) != lock.hash);
  }
}

TEST_CASE("ssh::parse_env_lock refuses what it cannot use, naming the interpreter") {
  struct Row {
    std::string json;
    std::string says;
  };
  std::vector<Row> rows{
      {"Traceback (most recent call last):", "/v/bin/python did not describe its environment"},
      {R"({"error": "cannot replicate foo 1.0 from /v: it was installed without a RECORD"})",
       "--sync-env: cannot replicate foo 1.0"},
      {R"({"minor": ""})", "gave no Python version"},
      {R"({"minor": "3.11", "packages": [{"name": "x", "version": "1", "key": "../../etc", "wheel": ""}]})",
       "a package sgpu cannot use"},
      {R"({"minor": "3.11", "packages": [{"name": "x", "version": "1", "key": "0123456789abcdef",
           "wheel": "0123456789abcdef/../../x.whl"}]})",
       "a package sgpu cannot use"},
      {R"({"minor": "3.11", "packages": [{"name": "x", "version": "1", "key": "0123456789abcdef",
           "wheel": "0123456789abcdef/x y.whl"}]})",
       "a package sgpu cannot use"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.json);
    try {
      (void)parse_env_lock(row.json, "/v/bin/python");
      FAIL("accepted");
    } catch (const sgpu::Error& e) {
      CHECK(std::string(e.what()).find(row.says) != std::string::npos);
    }
  }
}

TEST_CASE("ssh::judge_node: what keeps a node from running the environment") {
  auto lock = parse_env_lock(kLock, "/v/bin/python");
  struct Row {
    const char* name;
    void (*change)(NodeProbe&);
    std::string says;  // "" fit
  };
  std::vector<Row> rows{
      {"alike, another patch release", [](NodeProbe&) {}, ""},
      {"no python3.11",
       [](NodeProbe& p) {
         p.python.clear();
         p.other_python = "python3 Python 3.9.2";
       },
       "node gpu-b has no python3.11 on its PATH (this job's interpreter /v/bin/python is Python 3.11.2, and gpu-b "
       "has python3 Python 3.9.2); install Python 3.11 there"},
      {"another implementation", [](NodeProbe& p) { p.implementation = "pypy"; }, "is pypy, not cpython"},
      {"another platform", [](NodeProbe& p) { p.platform = "linux-aarch64"; },
       "node gpu-b is linux-aarch64 and this node is linux-x86_64"},
      {"a system package missing", [](NodeProbe& p) { p.system.erase("torch"); },
       "node gpu-b's python3.11 (/usr/bin/python3.11) lacks 1 of the 2 system packages this environment sees: torch "
       "2.1.2"},
      {"a system package of another version", [](NodeProbe& p) { p.system["numpy"] = "1.26.0"; },
       "has numpy 1.26.0 where this node has 1.24.2"},
      {"more system packages than a node needs", [](NodeProbe& p) { p.system["extra"] = "1"; }, ""},
  };
  for (const auto& row : rows) {
    CAPTURE(row.name);
    auto probe = probe_like(lock);
    row.change(probe);
    auto verdict = judge_node(lock, probe, "gpu-b");
    if (row.says.empty())
      CHECK(verdict.empty());
    else
      CHECK(verdict.find(row.says) != std::string::npos);
  }
  SUBCASE("without --system-site-packages, the node's own packages do not matter") {
    auto lone = lock;
    lone.system_site = false;
    auto probe = probe_like(lone);
    probe.system.clear();
    CHECK(judge_node(lone, probe, "gpu-b").empty());
  }
}

TEST_CASE("ssh::shipment_for sends a node only what it lacks") {
  auto lock = parse_env_lock(kLock, "/v/bin/python");
  lock.uv = "/usr/bin/uv";
  auto probe = probe_like(lock);
  auto all = shipment_for(lock, probe, 500);
  CHECK(all.wheels.size() == 3);
  CHECK(all.uv);
  CHECK(all.bytes == 1010 + 500);

  probe.keys = {"0123456789abcdef", "fedcba9876543210"};
  probe.has_uv = true;
  auto one = shipment_for(lock, probe, 500);
  REQUIRE(one.wheels.size() == 1);
  CHECK(one.wheels[0]->name == "torchvision");
  CHECK_FALSE(one.uv);
  CHECK(one.bytes == 1000);

  probe.env_ready = true;  // built there already: nothing at all
  auto none = shipment_for(lock, probe, 500);
  CHECK(none.wheels.empty());
  CHECK(none.bytes == 0);
}

TEST_CASE("ssh::parse_node_probe takes the last line and needs a home; settle_probe finds the lock's hash") {
  std::string why;
  auto p = parse_node_probe(
      "Welcome to gpu-b\n{\"home\": \"/home/u\", \"python\": \"/usr/bin/python3.11\", \"keys\": [\"b\", \"a\"], "
      "\"ready\": [\"ffff000011112222\", \"0000111122223333\"], \"bins\": [\"uv-1-2\"], "
      "\"system\": {\"torch\": \"2.1.2\"}}\n",
      why);
  REQUIRE(p);
  CHECK(p->keys == std::vector<std::string>{"a", "b"});
  CHECK(p->system.at("torch") == "2.1.2");
  auto lock = parse_env_lock(kLock, "/v/bin/python");
  settle_probe(lock, *p);
  CHECK_FALSE(p->env_ready);
  CHECK_FALSE(p->has_uv);  // no uv in this lock
  p->ready.push_back(lock.hash);
  std::sort(p->ready.begin(), p->ready.end());
  settle_probe(lock, *p);
  CHECK(p->env_ready);
  CHECK_FALSE(parse_node_probe("", why));
  CHECK(why == "it printed nothing");
  CHECK_FALSE(parse_node_probe("{\"home\": \"\"}", why));
  CHECK(why == "it gave no home directory");
  CHECK_FALSE(parse_node_probe("sh: 1: python3.11: not found", why));
  CHECK(why.starts_with("its answer was not JSON"));
}

TEST_CASE("ssh env scripts name the hash, the interpreter and the copy's python") {
  auto lock = parse_env_lock(kLock, "/v/bin/python");
  auto probe = env_probe_command(lock.minor);
  CHECK(probe.find("command -v python3.11") != std::string::npos);
  auto build = env_build_command(lock);
  CHECK(build.find("h=" + lock.hash) != std::string::npos);
  CHECK(build.find("--system-site-packages") != std::string::npos);
  CHECK(build.find("flock 9") != std::string::npos);
  CHECK(env_python(lock, "/home/u") == "/home/u/.cache/sgpu/envs/" + lock.hash + "/bin/python");
  CHECK(wheel_cache_dir({{"HOME", "/home/u"}}) == "/home/u/.cache/sgpu/wheels");
  CHECK(wheel_cache_dir({{"HOME", "/home/u"}, {"XDG_CACHE_HOME", "/c"}}) == "/c/sgpu/wheels");
}

TEST_CASE("ssh::parse_env_listing reads a host's environments and its wheel cache") {
  std::string why;
  auto node = parse_env_listing(
      "home /home/u\n"
      "env 0123456789abcdef 1764972000 1764975600 46284 24 1 kept\n"
      "env fedcba9876543210 1764900000 1764900000 20480 3 0 removed\n"
      "wheels 9216 2 1024\n",
      why);
  REQUIRE(node);
  CHECK(node->home == "/home/u");
  REQUIRE(node->envs.size() == 2);
  CHECK(node->envs[0].in_use);
  CHECK_FALSE(node->envs[0].removed);
  CHECK(node->envs[1].removed);
  CHECK(node->envs[0].packages == 24);
  CHECK(node->wheels_removed == 2);
  CHECK_FALSE(parse_env_listing("home /home/u\n", why));
  CHECK(why == "its answer had no wheels line");

  auto text = envs_text({{"gpu-a", *node}}, true, 1764975600 + 180);
  CHECK(text ==
        "gpu-a (/home/u/.cache/sgpu): 1 environment, 45.2 MiB; wheels 9.0 MiB\n"
        "  0123456789abcdef  built 2025-12-05 22:00 UTC (63m ago)  used 2025-12-05 23:00 UTC (3m ago)    45.2 MiB "
        "  24 packages  in use\n"
        "  fedcba9876543210  built 2025-12-05 02:00 UTC (21h ago)  used 2025-12-05 02:00 UTC (21h ago)    20.0 MiB "
        "   3 packages  removed\n"
        "removed 1 environment (20.0 MiB) and 2 wheels (1.0 MiB) on 1 host\n");
}

TEST_CASE("ssh::interpreter_minor reads a venv's pyvenv.cfg, else the name the interpreter resolves to") {
  namespace fs = std::filesystem;
  auto root = fs::temp_directory_path() / ("sgpu-minor-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "venv" / "bin");
  std::ofstream(root / "venv" / "pyvenv.cfg") << "home = /usr/bin\ninclude-system-site-packages = true\n"
                                                 "version = 3.11.2\n";
  CHECK(interpreter_minor((root / "venv" / "bin" / "python").string()) == "3.11");
  std::ofstream(root / "venv" / "pyvenv.cfg") << "home = /opt/py\nversion_info = 3.12.1\n";  // as uv writes it
  CHECK(interpreter_minor((root / "venv" / "bin" / "python").string()) == "3.12");
  fs::create_directories(root / "usr" / "bin");
  std::ofstream(root / "usr" / "bin" / "python3.10") << "";
  fs::create_symlink("python3.10", root / "usr" / "bin" / "python3");
  CHECK(interpreter_minor((root / "usr" / "bin" / "python3").string()) == "3.10");
  CHECK(interpreter_minor((root / "usr" / "bin" / "nothing").string()).empty());
  fs::remove_all(root);
}
