#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "backends/slurm/hostlist.hpp"
#include "sgpu/env/error.hpp"

using sgpu::launcher::slurm::compress_hostlist;
using sgpu::launcher::slurm::expand_hostlist;
using Hosts = std::vector<std::string>;

// Expected values are what `scontrol show hostnames` / `show hostlist` print
// (SLURM 22.05), except where the comment says sgpu is stricter.
TEST_CASE("slurm::expand_hostlist") {
  struct Row {
    const char* text;
    Hosts hosts;
  };
  const Row rows[] = {
      {"n1", {"n1"}},
      {"n1,n2", {"n1", "n2"}},
      {"n[01-04,07]", {"n01", "n02", "n03", "n04", "n07"}},
      {"a,b[1-2]", {"a", "b1", "b2"}},
      {"n[9-10]", {"n9", "n10"}},
      {"n[08-10]", {"n08", "n09", "n10"}},
      {"n[001-3]", {"n001", "n002", "n003"}},
      {"n[098-101]", {"n098", "n099", "n100", "n101"}},
      {"n[5]", {"n5"}},
      {"[1-3]", {"1", "2", "3"}},
      {"rack[1-2]-n[1-2]", {"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}},
      {"n[1-2][3-4]", {"n13", "n14", "n23", "n24"}},
      {"gpu-a[1-2].ib,cpu[3,1]", {"gpu-a1.ib", "gpu-a2.ib", "cpu3", "cpu1"}},
      {"n[1-2],n1", {"n1", "n2", "n1"}},  // duplicates kept, as SLURM does
      {"node-0.cluster_x", {"node-0.cluster_x"}},
      {"localhost", {"localhost"}},
  };
  for (const auto& row : rows) {
    std::string text = row.text;
    CAPTURE(text);
    CHECK(expand_hostlist(row.text, "SLURM_JOB_NODELIST") == row.hosts);
  }
  CHECK(expand_hostlist("n[0-4095]", "x").size() == 4096);
  CHECK(expand_hostlist("n[0-4095]", "x").back() == "n4095");
}

TEST_CASE("slurm::expand_hostlist rejects malformed lists") {
  struct Row {
    const char* text;
    const char* why;  // what the message must say, column included
  };
  const Row rows[] = {
      {"", "it is empty at column 1"},
      {"n[1-", "'[' is never closed at column 2"},
      {"n[1-2,", "'[' is never closed at column 2"},
      {"n[1-2", "'[' is never closed at column 2"},
      {"n[1,2", "'[' is never closed at column 2"},
      {"n[3-1]", "range 3-1 runs backwards at column 3"},
      {"n[]", "expected a number, not ']' at column 3"},
      {"n[a]", "expected a number, not 'a' at column 3"},
      {"n[1-x]", "expected a number, not 'x' at column 5"},
      {"n[1:2]", "unexpected ':' in brackets (expected ',' or ']') at column 4"},
      {"n[1[2]]", "unexpected '[' in brackets"},
      {"n1]", "']' without a matching '[' at column 3"},
      {"a,,b", "a host name is missing at column 3"},  // SLURM skips it; a typo more likely
      {",a", "a host name is missing at column 1"},
      {"a,", "a host name is missing at column 3"},
      {"a b", "unexpected whitespace (separate hosts with commas) at column 2"},
      {"n[1-99999999999999999999]", "number too large at column 5"},
      {"n[0-9999999]", "names more than 1048576 hosts"},
      {"n[0-1023][0-1023],x", "names more than 1048576 hosts"},
  };
  for (const auto& row : rows) {
    std::string text = row.text;
    CAPTURE(text);
    try {
      expand_hostlist(row.text, "SLURM_JOB_NODELIST");
      FAIL("accepted");
    } catch (const sgpu::Error& e) {
      std::string msg = e.what();
      CHECK(msg.find("SLURM_JOB_NODELIST") == 0);
      CHECK_MESSAGE(msg.find(row.why) != std::string::npos, msg);
      CHECK(e.exit_code() == 2);
    }
  }
  SUBCASE("syntax errors show the valid forms") {
    CHECK_THROWS_WITH_AS(expand_hostlist("n[", "--nodelist"),
                         doctest::Contains("--nodelist: invalid hostlist 'n[': '[' is never closed at column 2; valid "
                                           "forms: n1,n2 or n[01-04,07]"),
                         sgpu::Error);
  }
}

TEST_CASE("slurm::compress_hostlist") {
  struct Row {
    Hosts hosts;
    const char* text;
  };
  const Row rows[] = {
      {{}, ""},
      {{"n7"}, "n7"},
      {{"n1", "n2", "n3", "n5"}, "n[1-3,5]"},
      {{"n3", "n1", "n2"}, "n[3,1-2]"},  // order kept: node 0 stays first
      {{"n9", "n10"}, "n[9-10]"},
      {{"n09", "n10", "n1"}, "n[09-10,1]"},
      {{"n01", "n02", "n03", "n04", "n07"}, "n[01-04,07]"},
      {{"a", "b1", "b2"}, "a,b[1-2]"},
      {{"n1", "m1", "n2"}, "n1,m1,n2"},
      {{"n1", "n01"}, "n[1,01]"},
      {{"rack1-n1", "rack1-n2", "rack2-n1"}, "rack1-n[1-2],rack2-n1"},
      {{"login", "login"}, "login,login"},
      {{"5", "6"}, "[5-6]"},
  };
  for (const auto& row : rows) {
    std::string text = row.text;
    CAPTURE(text);
    CHECK(compress_hostlist(row.hosts) == row.text);
    if (!row.hosts.empty()) CHECK(expand_hostlist(row.text, "x") == row.hosts);
  }
  SUBCASE("round trip over a large, irregular list") {
    Hosts hosts;
    for (int i = 0; i < 300; ++i)
      if (i % 7 != 3) hosts.push_back((i % 50 < 25 ? "gpu" : "cpu") + std::to_string(i));
    hosts.emplace_back("gpu0099");
    CHECK(expand_hostlist(compress_hostlist(hosts), "x") == hosts);
  }
}
