// The ssh backend through the registry: what its check refuses and how it
// lays a job out for --dry-run, before any ssh runs.
#include <doctest/doctest.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/backend.hpp"
#include "sgpu/launcher/spec/spec_load.hpp"

using namespace sgpu::launcher;

namespace {

LaunchContext context(const std::string& toml) {
  auto resolved = resolve_spec({file_layer(toml, "job.toml")});
  LaunchContext ctx;
  ctx.spec = resolved.spec;
  ctx.cwd = "/work";
  return ctx;
}

}  // namespace

TEST_CASE("ssh backend: check names the setting at fault") {
  struct Row {
    const char* toml;
    const char* message;
  };
  const Row rows[] = {
      {"[resources]\nbackend = \"ssh\"\n",
       "job.toml:2:11: resources.backend = \"ssh\": needs hosts = [\"host:slots\", ...] or hostfile = \"FILE\" in "
       "[ssh]"},
      {"[resources]\nbackend = \"ssh\"\nnodes = 3\n[ssh]\nhosts = [\"a\", \"b\"]\n",
       "resources.nodes = 3: [ssh] hosts lists only 2 hosts"},
      {"[resources]\nbackend = \"ssh\"\n[ssh]\nhosts = [\"a\"]\n[rendezvous]\njoin_timeout = \"none\"\n",
       "rendezvous.join_timeout = \"none\": give a limit, e.g. 10s"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.toml);
    auto ctx = context(row.toml);
    auto backend = choose_backend(ctx.spec, {}).make();
    CHECK_THROWS_WITH_AS(backend->check(ctx), doctest::Contains(row.message), sgpu::Error);
  }
}

TEST_CASE("ssh backend: describe lists the hosts chosen, node 0 first") {
  auto ctx = context(
      "[resources]\nbackend = \"ssh\"\ngpus = 16\ngpus_per_node = 8\nnodes = 2\n[ssh]\nhosts = [\"alice@gpu-a:8\", "
      "\"gpu-b:8\", \"gpu-c:8\"]\n");
  auto backend = choose_backend(ctx.spec, {}).make();
  backend->check(ctx);
  auto layout = backend->describe(ctx);
  REQUIRE(layout.nodes.size() == 2);
  CHECK(layout.nodes[0].host == "gpu-a");
  CHECK(layout.nodes[1].host == "gpu-b");
  CHECK_FALSE(layout.nodes[1].gpus);  // checked on the host, at launch
  CHECK(layout.master_addr == "gpu-a");
}
