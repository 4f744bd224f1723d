#include <doctest/doctest.h>
#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "sgpu/env/error.hpp"
#include "sgpu/rendezvous/assignment.hpp"
#include "sgpu/rendezvous/auth.hpp"
#include "sgpu/rendezvous/endpoint.hpp"

using namespace sgpu::rendezvous;

TEST_CASE("rendezvous::parse_endpoint") {
  struct Row {
    const char* text;
    const char* host;
    int port;
  };
  const Row good[] = {
      {"node0:29400", "node0", 29400},
      {"10.0.0.1:1", "10.0.0.1", 1},
      {"[fe80::1]:65535", "fe80::1", 65535},
      {"[::1]:29400", "::1", 29400},
  };
  for (const auto& row : good) {
    CAPTURE(row.text);
    auto e = parse_endpoint(row.text, "--rdzv-endpoint");
    CHECK(e.host == row.host);
    CHECK(e.port == row.port);
  }
  CHECK(Endpoint{"fe80::1", 5}.str() == "[fe80::1]:5");
  CHECK(Endpoint{"node0", 5}.str() == "node0:5");

  struct Bad {
    const char* text;
    const char* why;
  };
  const Bad bad[] = {
      {"node0", "no port"},
      {"node0:", "the port is not a number"},
      {"node0:http", "the port is not a number"},
      {"node0:0", "between 1 and 65535"},
      {"node0:70000", "between 1 and 65535"},
      {":29400", "no host"},
      {"fe80::1:29400", "an IPv6 address needs brackets"},
      {"[fe80::1:29400", "no closing ']'"},
      {"[fe80::1]29400", "no port"},
  };
  for (const auto& row : bad) {
    CAPTURE(row.text);
    CHECK_THROWS_WITH_AS(parse_endpoint(row.text, "--rdzv-endpoint"), doctest::Contains(row.why), sgpu::Error);
    CHECK_THROWS_WITH_AS(parse_endpoint(row.text, "--rdzv-endpoint"),
                         doctest::Contains((std::string("--rdzv-endpoint ") + row.text).c_str()), sgpu::Error);
  }
}

TEST_CASE("rendezvous::addresses") {
  CHECK(unmap_v4("::ffff:10.0.0.1") == "10.0.0.1");
  CHECK(unmap_v4("fe80::1") == "fe80::1");
  CHECK(unmap_v4("::ffff:abcd") == "::ffff:abcd");
  CHECK(is_loopback_address("127.0.0.1"));
  CHECK(is_loopback_address("::ffff:127.0.0.5"));
  CHECK(is_loopback_address("::1"));
  CHECK_FALSE(is_loopback_address("10.0.0.1"));
}

namespace {
Join join(const char* name, int node_rank = -1, std::uint32_t ranks = 2, std::uint32_t nnodes = 0) {
  Join j;
  j.name = name;
  j.node_rank = node_rank;
  j.local_ranks = ranks;
  j.nnodes = nnodes;
  return j;
}
}  // namespace

TEST_CASE("rendezvous::check_join") {
  using Kind = JoinCheck::Kind;
  struct Row {
    std::vector<Join> joined;
    Join candidate;
    Kind kind;
    const char* message;
  };
  const Row rows[] = {
      {{}, join("a"), Kind::Accept, ""},
      {{join("a", 0)}, join("b", 1), Kind::Accept, ""},
      {{join("a", 0)}, join("b"), Kind::Accept, ""},
      {{join("a", 1)}, join("b", 1), Kind::Conflict, "node rank 1 is claimed by both a and b"},
      {{}, join("b", 2), Kind::Conflict, "node b asked for node rank 2 but the job has 2 nodes (valid: 0 to 1)"},
      {{}, join("b", -1, 2, 3), Kind::Conflict, "node b was started for 3 nodes but the launcher runs 2"},
      {{}, join("b", -1, 0), Kind::Refuse, "node b has no ranks to run"},
      {{join("a"), join("b")}, join("c"), Kind::Refuse, "the rendezvous is full: all 2 nodes have joined"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.candidate.name);
    const Join* holder = nullptr;
    for (const auto& j : row.joined)
      if (row.candidate.node_rank >= 0 && j.node_rank == row.candidate.node_rank) holder = &j;
    auto check = check_join(row.joined.size(), holder, row.candidate, 2);
    CHECK(check.kind == row.kind);
    CHECK(check.message.find(row.message) != std::string::npos);
  }
}

TEST_CASE("rendezvous::assign_node_ranks") {
  struct Row {
    std::vector<Join> joined;
    std::vector<std::uint32_t> ranks;
  };
  const Row rows[] = {
      // Explicit ranks are honoured whatever the arrival order.
      {{join("a", 2), join("b", 0), join("c", 1)}, {2, 0, 1}},
      // The others fill the free ranks sorted by name: stable across runs.
      {{join("c"), join("a"), join("b")}, {2, 0, 1}},
      {{join("b"), join("a", 0), join("c")}, {1, 0, 2}},
      {{join("z"), join("y", 1), join("x")}, {2, 1, 0}},
      // Equal names keep their arrival order.
      {{join("h"), join("h"), join("h")}, {0, 1, 2}},
  };
  for (const auto& row : rows) CHECK(assign_node_ranks(row.joined, 3) == row.ranks);
  CHECK(rank_bases({4, 2, 8}) == std::vector<std::uint32_t>{0, 4, 6});
  CHECK(rank_bases({1}) == std::vector<std::uint32_t>{0});
}

TEST_CASE("rendezvous::choose_master_addr") {
  struct Row {
    MasterAddrInputs in;
    const char* expected;
  };
  const Row rows[] = {
      {{"head.example", "10.0.0.5", {"10.0.0.1"}}, "head.example"},  // --master-addr wins
      {{"", "10.0.0.5", {"10.0.0.1"}}, "10.0.0.5"},                  // node 0 is remote: as the launcher saw it
      {{"", "::ffff:10.0.0.5", {}}, "10.0.0.5"},
      {{"", "127.0.0.1", {"127.0.0.1", "10.0.0.1"}}, "10.0.0.1"},  // node 0 beside the launcher
      {{"", "127.0.0.1", {"::ffff:10.0.0.1"}}, "10.0.0.1"},
      {{"", "127.0.0.1", {"127.0.0.1"}}, "127.0.0.1"},  // every node local
      {{"", "127.0.0.1", {}}, "127.0.0.1"},             // one node
      {{"", "::1", {}}, "::1"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.in.node0_peer);
    CHECK(choose_master_addr(row.in) == row.expected);
  }
}

TEST_CASE("rendezvous::describe_missing") {
  CHECK(describe_missing({join("a", 0)}, 3, {}) ==
        "1 of 3 nodes joined (a as node rank 0); missing: node rank 1, node rank 2");
  CHECK(describe_missing({}, 2, {"a", "b"}) == "0 of 2 nodes joined; missing: a (node rank 0), b (node rank 1)");
  CHECK(describe_missing({join("b")}, 2, {"a", "b"}) == "1 of 2 nodes joined (b); missing: a (node rank 0)");
  CHECK(describe_missing({join("x")}, 3, {}) == "1 of 3 nodes joined (x); 2 more nodes never came");
}

TEST_CASE("rendezvous::auth") {
  auto secret = Secret::generate();
  CHECK(secret.text().size() == 64);
  CHECK(Secret::generate().text() != secret.text());
  auto c = make_nonce();
  auto s = make_nonce();
  CHECK(c != s);
  CHECK(proof_matches(server_proof(secret, c, s), server_proof(secret, c, s)));
  // The two directions, other nonces and other secrets all give other proofs.
  CHECK_FALSE(proof_matches(server_proof(secret, c, s), client_proof(secret, s, c)));
  CHECK_FALSE(proof_matches(server_proof(secret, c, s), server_proof(secret, s, c)));
  CHECK_FALSE(proof_matches(server_proof(secret, c, s), server_proof(Secret::generate(), c, s)));

  // Known answers (Python's hmac module), also after another secret was used
  // between two uses of this one: the keyed context follows the secret.
  auto known = Secret::from_text("0123456789abcdef0123456789abcdef", "test");
  Nonce first{};
  Nonce second{};
  for (std::size_t i = 0; i < first.size(); ++i) {
    first[i] = static_cast<unsigned char>(i);
    second[i] = static_cast<unsigned char>(32 + i);
  }
  const std::string expected = "27229bc36f1bdd14c4e766b15b22f2554f7dd6d4db82b3ec4ab9e19387fbd0e4";
  auto hex = [](const Proof& p) {
    std::string out;
    for (unsigned char b : p) out += fmt::format("{:02x}", b);
    return out;
  };
  CHECK(hex(server_proof(known, first, second)) == expected);
  CHECK(derive_hex(known, "label-x") == "e7967e3695140eaf17c505e175c74f2dde488628ba8034e3a878751d1e1f4809");
  CHECK_FALSE(hex(server_proof(secret, first, second)) == expected);
  CHECK(hex(server_proof(known, first, second)) == expected);

  CHECK(Secret::from_text("  " + secret.text() + "\n", "test").text() == secret.text());
  CHECK_THROWS_WITH_AS(Secret::from_text("short", "SGPU_RDZV_SECRET"),
                       doctest::Contains("SGPU_RDZV_SECRET: the rendezvous secret has 5 characters"), sgpu::Error);
}

TEST_CASE("rendezvous::secret files") {
  auto dir = std::filesystem::temp_directory_path() / ("sgpu-secret-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = (dir / "secret").string();
  auto secret = Secret::generate();
  write_secret_file(path, secret);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(load_secret_file(path, "--rdzv-secret-file").text() == secret.text());
  CHECK_THROWS_WITH_AS(write_secret_file(path, secret), doctest::Contains("cannot create the secret file"),
                       sgpu::Error);
  ::chmod(path.c_str(), 0644);
  CHECK_THROWS_WITH_AS(load_secret_file(path, "--rdzv-secret-file"),
                       doctest::Contains("others can read it (mode 0644); run: chmod 600"), sgpu::Error);
  CHECK_THROWS_WITH_AS(load_secret_file((dir / "none").string(), "--rdzv-secret-file"),
                       doctest::Contains("cannot open"), sgpu::Error);
  sgpu::env::Environment env{{kSecretEnvVar, secret.text()}};
  CHECK(find_secret(env, "", "--rdzv-secret-file").text() == secret.text());
  CHECK_THROWS_WITH_AS(find_secret({}, "", "--rdzv-secret-file"),
                       doctest::Contains("give --rdzv-secret-file FILE (mode 0600) or set SGPU_RDZV_SECRET"),
                       sgpu::Error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("rendezvous::distinct_node_names") {
  using V = std::vector<std::string>;
  CHECK(distinct_node_names({}) == V{});
  CHECK(distinct_node_names({"a", "b"}) == V{"a", "b"});
  CHECK(distinct_node_names({"box", "box"}) == V{"box#0", "box#1"});
  CHECK(distinct_node_names({"box", "gpu1", "box", "box"}) == V{"box#0", "gpu1", "box#2", "box#3"});
}
