#include <doctest/doctest.h>

#include <fmt/format.h>

#include "backends/ssh/hosts.hpp"
#include "sgpu/env/error.hpp"

using namespace sgpu::launcher::ssh;

namespace {

// "user@host:slots/type/port/origin" per entry, for compact tables.
std::string summary(const std::vector<HostEntry>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += " ";
    out += (h.user.empty() ? "" : h.user + "@") + h.host + ":" + (h.slots ? std::to_string(*h.slots) : "?");
    if (!h.gpu_type.empty()) out += "/" + h.gpu_type;
    if (h.port) out += "/p" + std::to_string(*h.port);
  }
  return out;
}

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const sgpu::Error& e) {
    CHECK(e.exit_code() == sgpu::kExitUsage);
    return e.what();
  }
  return "(accepted)";
}

std::string assignments(const std::vector<NodeAssignment>& nodes) {
  std::string out;
  for (const auto& n : nodes) {
    if (!out.empty()) out += " ";
    out += n.entry.host + "=" + std::to_string(n.ranks);
    if (!n.devices.empty()) {
      out += "[";
      for (std::size_t i = 0; i < n.devices.size(); ++i) out += (i ? "," : "") + std::to_string(n.devices[i]);
      out += "]";
    }
  }
  return out;
}

std::vector<NodeAssignment> pick(const char* hosts, const char* include, const char* exclude, HostRequest req) {
  auto pool = parse_hosts_list(hosts);
  std::vector<HostFilter> inc, exc;
  if (*include) inc = parse_host_filter(include, "--include");
  if (*exclude) exc = parse_host_filter(exclude, "--exclude");
  return select_hosts(filter_hosts(pool, inc, exc), req);
}

}  // namespace

TEST_CASE("ssh::parse_hostfile accepts the formats users have") {
  struct Row {
    const char* text;
    const char* hosts;
  };
  const Row rows[] = {
      {"worker-1 slots=8\nworker-2 slots=8\n", "worker-1:8 worker-2:8"},  // OpenMPI, DeepSpeed
      {"node1:4\nnode2:2", "node1:4 node2:2"},                            // MPICH, no final newline
      {"alice@a slots=2\nbob@b:3\n", "alice@a:2 bob@b:3"},                // user@host
      {"# cluster\n\n  a slots=8   # the big one\n\t\nb\n", "a:8 b:?"},   // comments, blanks, no slots
      {"a slots=8 gpu_type=H100\nb slots=4 gpu-type=a100 port=2222", "a:8/H100 b:4/a100/p2222"},  // sgpu's keys
      {"a slots=8 max_slots=16\n", "a:8"},                                                        // OpenMPI's max_slots
      {"10.77.0.11 slots=2\n10.77.0.12:2\n", "10.77.0.11:2 10.77.0.12:2"},                        // addresses
      {"fe80::1 slots=2\n[::1]:4\nroot@[fd00::2]\n", "fe80::1:2 ::1:4 root@fd00::2:?"},           // IPv6
      {"a slots=1\r\nb slots=2\r\n", "a:1 b:2"},                                                  // CRLF
      {"", ""},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    CHECK(summary(parse_hostfile(row.text, "hosts")) == row.hosts);
  }
  SUBCASE("origin names file and line") {
    auto hosts = parse_hostfile("# x\n\na slots=1\n", "/etc/hosts.txt");
    CHECK(hosts.at(0).origin == "/etc/hosts.txt:3");
  }
}

TEST_CASE("ssh::parse_hostfile rejects bad lines with file:line:col") {
  struct Row {
    const char* text;
    const char* message;
  };
  const Row rows[] = {
      {"a slots=8\nb slots=2\nA slots=4\n", "hosts:3:1: host 'A' is listed twice (first at hosts:1)"},
      {"a:2\nalice@a:4\n", "hosts:2:1: host 'a' is listed twice (first at hosts:1)"},
      {"a slots=x\n", "hosts:1:3: slot count 'x' is not a number from 1 to 4096"},
      {"a slots=0\n", "hosts:1:3: slot count '0' is not a number"},
      {"a slots=-1\n", "hosts:1:3: slot count '-1' is not"},
      {"a:\n", "hosts:1:1: ':' without a slot count"},
      {"a:8 slots=8\n", "hosts:1:5: the slot count is given twice"},
      {"a slots=8 slots=4\n", "hosts:1:11: 'slots' is given twice"},
      {"a gpus=8\n", "hosts:1:3: unknown key 'gpus'; valid keys: slots, max_slots, gpu_type, port"},
      {"a 8\n", "hosts:1:3: expected key=value after the host, got '8'"},
      {"a slots=\n", "hosts:1:3: 'slots=' has no value"},
      {"  -oProxyCommand=x slots=1\n", "hosts:1:3: '-oProxyCommand=x' is not a host name"},
      {"a;reboot slots=1\n", "hosts:1:1: 'a;reboot' is not a host name"},
      {"$(id) slots=1\n", "is not a host name"},
      {"@a slots=1\n", "hosts:1:1: '' is not a user name"},
      {"-u@a slots=1\n", "'-u' is not a user name"},
      {"a port=0\n", "hosts:1:3: port '0' is not from 1 to 65535"},
      {"a gpu_type=H1$0\n", "gpu_type 'H1$0' is not a GPU type"},
      {"[::1\n", "'[' without ']'"},
      {"[::1]x\n", "unexpected 'x' after ']'"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    CHECK(error_of([&] { parse_hostfile(row.text, "hosts"); }).find(row.message) != std::string::npos);
  }
}

TEST_CASE("ssh::parse_hosts_list") {
  CHECK(summary(parse_hosts_list("a:8,b:8")) == "a:8 b:8");
  CHECK(summary(parse_hosts_list("alice@a:4, b")) == "alice@a:4 b:?");
  CHECK(summary(parse_hosts_list("[::1]:2,10.0.0.1")) == "::1:2 10.0.0.1:?");
  CHECK(parse_hosts_list("a:1,b:2").at(1).origin == "--hosts entry 2");
  struct Row {
    const char* text;
    const char* message;
  };
  const Row rows[] = {
      {"", "--hosts: no hosts given"},
      {"a:8,,b:8", "--hosts 'a:8,,b:8', entry 2: empty entry"},
      {"a:8,b:x", "entry 2: slot count 'x' is not a number"},
      {"a:8,A:8", "entry 2: host 'A' is listed twice (first at --hosts entry 1)"},
      {"a:8,", "entry 2: empty entry"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    CHECK(error_of([&] { parse_hosts_list(row.text); }).find(row.message) != std::string::npos);
  }
}

TEST_CASE("ssh::parse_host_filter") {
  auto f = parse_host_filter("a:0,2@b", "--include");
  REQUIRE(f.size() == 2);
  CHECK(f[0].host == "a");
  CHECK(f[0].devices == std::vector<int>{0, 2});
  CHECK(f[1].host == "b");
  CHECK(f[1].devices.empty());
  CHECK(parse_host_filter("[fd00::1]:1", "--include").at(0).host == "fd00::1");
  // One node's GPUs without a host (a local run): host "".
  auto here = parse_host_filter(":3,1", "--exclude");
  REQUIRE(here.size() == 1);
  CHECK(here[0].host.empty());
  CHECK(here[0].devices == std::vector<int>{3, 1});
  struct Row {
    const char* text;
    const char* message;
  };
  const Row rows[] = {
      {"", "--exclude: empty filter"},
      {"a@@b", "empty host between '@'"},
      {"a:", "'a:' has no devices"},
      {":", "a ':' without devices"},
      {":1@:2", "host '' is named twice"},
      {"a:x", "device 'x' of host 'a' is not a device index"},
      {"a:-1", "device '-1' of host 'a'"},
      {"a:1,1", "device 1 of host 'a' is named twice"},
      {"a:1,", "trailing ','"},
      {"a:1@A:2", "host 'A' is named twice"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    CHECK(error_of([&] { parse_host_filter(row.text, "--exclude"); }).find(row.message) != std::string::npos);
  }
}

TEST_CASE("ssh::filter_hosts and select_hosts") {
  struct Row {
    const char* hosts;
    const char* include;
    const char* exclude;
    int ranks;
    int per_node;  // 0: not given
    const char* type;
    const char* chosen;
  };
  const Row rows[] = {
      {"a:8,b:8", "", "", 16, 0, "", "a=8 b=8"},
      {"a:8,b:8", "", "", 12, 0, "", "a=8 b=4"},  // fills hosts in order
      {"a:8,b:8,c:8", "", "", 8, 0, "", "a=8"},
      {"a:8,b:8,c:8", "", "a", 16, 0, "", "b=8 c=8"},
      {"a:4,b:8,c:8", "", "", 16, 8, "", "b=8 c=8"},  // a has too few for 8 per node
      {"a:8,b:8", "", "", 8, 4, "", "a=4 b=4"},
      {"a,b,c", "", "", 4, 2, "", "a=2 b=2"},                // slots unknown: --gpus-per-node decides
      {"a:4,b:4", "a:0,2@b", "", 6, 0, "", "a=2[0,2] b=4"},  // DeepSpeed's include
      {"a:4,b:4", "", "b:1", 7, 0, "", "a=4 b=3[0,2,3]"},    // DeepSpeed's exclude
      {"a:4,b:4", "b", "b:0", 3, 0, "", "b=3[1,2,3]"},       // include, then exclude
      {"a:4,b:4", "", "a:0,1,2,3", 4, 0, "", "b=4"},         // every device excluded: host gone
      {"a,b", "a:1,3@b:0,1", "", 4, 2, "", "a=2[1,3] b=2[0,1]"},
  };
  for (const auto& row : rows) {
    std::string where =
        fmt::format("{} include={} exclude={} ranks={}", row.hosts, row.include, row.exclude, row.ranks);
    CAPTURE(where);
    HostRequest req{row.ranks, row.per_node ? std::optional<int>(row.per_node) : std::nullopt, row.type};
    CHECK(assignments(pick(row.hosts, row.include, row.exclude, req)) == row.chosen);
  }
  SUBCASE("gpu_type per host steers the choice") {
    auto pool = parse_hostfile("a slots=8 gpu_type=A100\nb slots=8 gpu_type=H100\nc slots=8\n", "hosts");
    auto cands = filter_hosts(pool, {}, {});
    CHECK(assignments(select_hosts(cands, {16, std::nullopt, "h100"})) == "b=8 c=8");
    CHECK(assignments(select_hosts(cands, {8, std::nullopt, ""})) == "a=8");
    auto msg = error_of([&] { select_hosts(cands, {24, std::nullopt, "H100", "--hostfile hosts"}); });
    CHECK(msg == "--gpus 24: --hostfile hosts has only 16 slots: b (8 slots H100), c (8 slots); not H100: a (A100)");
    auto typed = filter_hosts(parse_hostfile("a slots=4 gpu_type=A100\n", "hosts"), {}, {});
    CHECK(error_of([&] {
            select_hosts(typed, {4, std::nullopt, "B200"});
          }) == "--gpus 4: the host list has no B200 hosts; not B200: a (A100)");
  }
}

TEST_CASE("ssh::select_hosts says clearly when the pool cannot") {
  struct Row {
    const char* hosts;
    const char* include;
    const char* exclude;
    int ranks;
    int per_node;
    const char* type;
    const char* message;
  };
  const Row rows[] = {
      {"a:8,b:8", "", "", 20, 0, "", "--gpus 20: the host list has only 16 slots: a (8 slots), b (8 slots)"},
      {"a:8,b:4", "", "", 16, 8, "",
       "--gpus 16 with --gpus-per-node 8 needs 2 hosts with 8 free slots each; the host list has 1: a (8 slots), b (4 "
       "slots)"},
      {"a:8", "", "", 12, 8, "", "--gpus 12 is not a multiple of --gpus-per-node 8"},
      {"a:8,b", "", "", 12, 0, "", "host 'b' (--hosts entry 2) has no slot count"},
      {"a:4,b:4", "a:0", "", 4, 0, "", "the host list has only 1 slot: a (devices 0)"},
      {"a:4,b:4", "c", "", 4, 0, "", "--include: host 'c' is not in the host list; the hosts are: a, b"},
      {"a:4,b:4", "", "c:1", 4, 0, "", "--exclude: host 'c' is not in the host list"},
      {"a:4,b:4", "a:4", "", 4, 0, "", "--include: host 'a' has 4 slots (--hosts entry 1), so its devices are 0 to 3"},
      {"a:4,b", "", "b:0", 4, 0, "", "--exclude: host 'b' has no slot count (--hosts entry 2)"},
  };
  for (const auto& row : rows) {
    HostRequest req{row.ranks, row.per_node ? std::optional<int>(row.per_node) : std::nullopt, row.type};
    std::string message = error_of([&] { pick(row.hosts, row.include, row.exclude, req); });
    CAPTURE(message);
    CHECK(message.find(row.message) != std::string::npos);
  }
}
