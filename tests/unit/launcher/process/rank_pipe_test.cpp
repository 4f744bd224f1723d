#include <doctest/doctest.h>

#include "sgpu/launcher/process/rank_process.hpp"

using sgpu::launcher::rank_pipe_size;

TEST_CASE("launcher::rank_pipe_size") {
  SUBCASE("a few ranks get 256 KiB each") {
    CHECK(rank_pipe_size(1) == 256 << 10);
    CHECK(rank_pipe_size(8) == 256 << 10);
    CHECK(rank_pipe_size(64) == 256 << 10);
  }
  SUBCASE("more share 16 MiB") {
    CHECK(rank_pipe_size(65) == 128 << 10);
    CHECK(rank_pipe_size(128) == 128 << 10);
  }
  SUBCASE("past that, the kernel's default") {
    CHECK(rank_pipe_size(129) == 0);
    CHECK(rank_pipe_size(4096) == 0);
    CHECK(rank_pipe_size(0) == 0);
  }
}
