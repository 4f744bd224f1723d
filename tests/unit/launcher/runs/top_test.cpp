// sgpu top's screen: the rows sorted, filtered and cut to the terminal.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "sgpu/launcher/runs/top.hpp"

using namespace sgpu::launcher;

namespace {

TopView view() {
  TopView v;
  v.run_id = "20261205-120000-abcdef";
  v.state = "running";
  v.sampled_at = "2026-12-05T12:00:10.000Z";
  auto row = [](int rank, double cpu, double rate, double quiet, std::string line, bool straggler) {
    TopRow r;
    r.rank = rank;
    r.host = rank < 2 ? "gpu-a" : "gpu-b";
    r.state = "running";
    r.cpu = cpu;
    r.rss_mib = 100 + rank;
    r.step_rate = rate;
    r.output_age_s = quiet;
    r.last_line = std::move(line);
    r.straggler = straggler;
    return r;
  };
  v.rows = {row(0, 90, 10, 1, "loss 0.5", false), row(1, 99, 4, 9, "loss 0.7", true),
            row(2, 50, 10, 30, "evaluating", false), row(3, 10, 9, 2, "loss 0.4", false)};
  return v;
}

std::vector<int> ranks_shown(const std::vector<std::string>& lines) {
  std::vector<int> out;
  for (std::size_t i = 3; i < lines.size(); ++i)
    if (!lines[i].empty() && lines[i][0] != '(') out.push_back(std::stoi(lines[i]));
  return out;
}

}  // namespace

TEST_CASE("top: each sort puts what one looks for first") {
  struct Row {
    TopSort sort;
    std::vector<int> order;
  };
  std::vector<Row> rows = {
      {TopSort::Rank, {0, 1, 2, 3}},   {TopSort::Cpu, {1, 0, 2, 3}},  // the busiest first
      {TopSort::Rate, {1, 3, 0, 2}},                                  // the slowest first (ties keep rank order)
      {TopSort::Output, {2, 1, 3, 0}},                                // the longest silent first
      {TopSort::Memory, {3, 2, 1, 0}},
  };
  for (const auto& row : rows) {
    TopOptions o;
    o.sort = row.sort;
    CHECK(ranks_shown(render_top(view(), o, 200, 0)) == row.order);
  }
}

TEST_CASE("top: the filter and the stragglers alone, with how many are shown") {
  struct Row {
    std::string filter;
    bool stragglers;
    std::vector<int> shown;
  };
  std::vector<Row> rows = {
      {"", false, {0, 1, 2, 3}},  {"gpu-b", false, {2, 3}}, {"2", false, {2}},  // a rank's number, whole
      {"loss", false, {0, 1, 3}}, {"", true, {1}},          {"gpu-b", true, {}},
  };
  for (const auto& row : rows) {
    TopOptions o;
    o.filter = row.filter;
    o.stragglers_only = row.stragglers;
    CAPTURE(row.filter);
    auto lines = render_top(view(), o, 200, 0);
    CHECK(ranks_shown(lines) == row.shown);
    bool all = row.shown.size() == 4;
    CHECK((lines.back().find("ranks shown") != std::string::npos) == !all);
  }
}

TEST_CASE("top: the header, the straggler's mark, and lines cut to the terminal") {
  auto lines = render_top(view(), {}, 200, 0);
  CHECK(lines[0] ==
        "sgpu top: run 20261205-120000-abcdef running, 4 ranks, 1 straggler, sampled 2026-12-05T12:00:10.000Z");
  CHECK(lines[4].rfind("   1* gpu-a", 0) == 0);
  CHECK(lines[4].find("loss 0.7") != std::string::npos);
  for (const auto& l : render_top(view(), {}, 40, 0)) CHECK(l.size() <= 40);
  // A short terminal: as many lines as it has.
  CHECK(render_top(view(), {}, 200, 5).size() == 5);
  // No sample yet, and what was not sampled is "-".
  TopView bare;
  bare.run_id = "r";
  bare.state = "running";
  TopRow r;
  r.state = "running";
  bare.rows.push_back(r);
  auto b = render_top(bare, {}, 200, 0);
  CHECK(b[0].find("no sample yet") != std::string::npos);
  CHECK(b[3] == "   0               running     -     -       -      -        -        -      -");
}
