#include <fcntl.h>
#include <sys/resource.h>
#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <string>

#include <doctest/doctest.h>

#include "sgpu/launcher/process/open_files.hpp"

using namespace sgpu::launcher;

TEST_CASE("launcher::open_files_needed") {
  CHECK(open_files_needed(0) == 64);
  CHECK(open_files_needed(1) == 69);
  CHECK(open_files_needed(1000) == 5064);
  // Measured: a run holds about 20 descriptors, and exactly 5 more per running rank.
  CHECK(open_files_needed(4096) == 20544);
}

TEST_CASE("launcher::raised_soft_limit") {
  SUBCASE("raised to what is needed") {
    CHECK(raised_soft_limit(1024, 524288, 6064) == 6064);
    CHECK(raised_soft_limit(1024, RLIM_INFINITY, 6064) == 6064);
  }
  SUBCASE("never above the hard limit: the caller reports the shortfall") {
    CHECK(raised_soft_limit(1024, 4096, 6064) == 4096);
  }
  SUBCASE("never lowered") {
    CHECK(raised_soft_limit(65536, 524288, 6064) == 65536);
    CHECK(raised_soft_limit(RLIM_INFINITY, RLIM_INFINITY, 6064) == RLIM_INFINITY);
  }
}

TEST_CASE("launcher::node_connections") {
  struct Row {
    int nnodes;
    rlim_t wanted, needed;
  };
  for (auto r : {Row{1, 258, 33}, Row{2048, 4352, 2080}, Row{16385, 33026, 16417}}) {
    CAPTURE(r.nnodes);
    CHECK(node_connections_wanted(r.nnodes) == r.wanted);
    CHECK(node_connections_needed(r.nnodes) == r.needed);
  }
}

namespace {
// The size of this process's descriptor table, as the kernel reports it.
long descriptor_table_size() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("FDSize:", 0) == 0) return std::stol(line.substr(7));
  return -1;
}
}  // namespace

TEST_CASE("launcher::reserve_descriptor_table") {
  rlimit lim{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &lim) == 0);
  long before = descriptor_table_size();
  REQUIRE(before > 0);
  // Within the soft limit: the table holds that many now (never fewer than it did).
  rlim_t wanted = std::min<rlim_t>(lim.rlim_cur, static_cast<rlim_t>(before) + 300);
  reserve_descriptor_table(wanted);
  CHECK(descriptor_table_size() >= static_cast<long>(wanted));
  // Past the soft limit: up to it, and no error.
  reserve_descriptor_table(lim.rlim_cur + 1000);
  CHECK(descriptor_table_size() >= static_cast<long>(std::min<rlim_t>(lim.rlim_cur, 1 << 20)));
  // No descriptor is left open by it.
  CHECK(::fcntl(static_cast<int>(wanted) - 1, F_GETFD) == -1);
}
