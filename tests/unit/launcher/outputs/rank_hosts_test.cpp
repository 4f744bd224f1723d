// apply_placement: which name each rank's events and rows carry once a node
// was placed again (a spare taking a lost node's place).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "sgpu/launcher/outputs/rank_hosts.hpp"

using namespace sgpu::launcher;

TEST_CASE("a placement names its ranks; the launcher's own ranks and unknown ranks stay as they were") {
  struct Case {
    const char* what;
    std::vector<std::string> before;
    std::vector<NodePlacement> nodes;
    std::vector<std::string> after;
  };
  const std::vector<Case> cases = {
      {"a spare takes node 1's two ranks",
       {"a", "a", "b", "b"},
       {{0, "a", 0, 2}, {1, "c", 2, 2}},
       {"a", "a", "c", "c"}},
      {"a spare takes node 0's place", {"a", "b"}, {{0, "c", 0, 1}, {1, "b", 1, 1}}, {"c", "b"}},
      {"the launcher's own node (no name) keeps none", {"", "", "b"}, {{0, "vm", 0, 2}, {1, "c", 2, 1}}, {"", "", "c"}},
      {"ranks beyond the run are ignored", {"a"}, {{0, "c", 0, 3}}, {"c"}},
      {"a single-node run has no names", {}, {{0, "c", 0, 2}}, {}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    auto hosts = c.before;
    apply_placement(hosts, c.nodes);
    CHECK(hosts == c.after);
  }
}
