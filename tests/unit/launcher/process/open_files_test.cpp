#include <initializer_list>

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
