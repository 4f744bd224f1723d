#include <doctest/doctest.h>

#include <thread>

#include "sgpu/launcher/process/read_buffers.hpp"

using sgpu::launcher::BytesOwner;
using sgpu::launcher::ReadBuffers;

TEST_CASE("launcher::ReadBuffers") {
  ReadBuffers buffers(4096, 2);
  CHECK(buffers.size() == 4096);
  CHECK(buffers.owner() == nullptr);  // nothing allocated before the first read

  SUBCASE("a buffer nobody kept is read into again") {
    char* first = buffers.current();
    REQUIRE(first != nullptr);
    CHECK(buffers.current() == first);
    CHECK(buffers.owner().get() == first);
  }
  SUBCASE("a kept buffer is left alone: the next read gets another, and the bytes stay") {
    char* first = buffers.current();
    first[0] = 'a';
    BytesOwner kept = buffers.owner();
    char* second = buffers.current();
    CHECK(second != first);
    second[0] = 'b';
    CHECK(static_cast<const char*>(kept.get())[0] == 'a');
  }
  SUBCASE("a buffer let go on another thread comes back for the next read") {
    char* first = buffers.current();
    BytesOwner kept = buffers.owner();
    char* second = buffers.current();
    std::thread([held = std::move(kept)]() mutable { held.reset(); }).join();
    CHECK(buffers.spare() == 1);
    BytesOwner kept_again = buffers.owner();  // `second` is kept now
    CHECK(buffers.current() == first);
    CHECK(buffers.spare() == 0);
    CHECK(kept_again.get() == second);
  }
  SUBCASE("the pool keeps at most `keep` spare buffers") {
    std::vector<BytesOwner> kept;
    for (int i = 0; i < 5; ++i) {
      buffers.current();
      kept.push_back(buffers.owner());
    }
    kept.clear();
    CHECK(buffers.spare() == 2);
  }
  SUBCASE("buffers outlive the pool's owner") {
    BytesOwner kept;
    {
      ReadBuffers gone(64, 1);
      gone.current()[0] = 'x';
      kept = gone.owner();
    }
    CHECK(static_cast<const char*>(kept.get())[0] == 'x');
  }
}
