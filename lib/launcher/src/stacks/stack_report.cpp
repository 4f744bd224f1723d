#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"

namespace sgpu::launcher {
using nlohmann::json;

namespace {
constexpr std::size_t kSummaryFrames = 5;  // frames in a group's one-line summary

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

std::string where(const StackFrame& f) {
  if (f.file.empty()) return f.name;
  return fmt::format("{}  {}:{}", f.name, f.file, f.line);
}

// The innermost frame, then the user's frames outwards: what a reader needs
// to see where the rank is and how it got there.
// A native frame without a symbol ("0x7f9c69f07f16") differs between
// processes (address randomisation): it does not tell ranks apart.
bool unnamed(const StackFrame& f) { return f.name.rfind("0x", 0) == 0; }

std::string summary_of(const ThreadStack& t) {
  std::size_t first = 0;
  while (first < t.frames.size() && unnamed(t.frames[first])) ++first;
  if (first == t.frames.size()) return "(no frames)";
  std::vector<std::string> parts{where(t.frames[first])};
  for (std::size_t i = first + 1; i < t.frames.size() && parts.size() < kSummaryFrames; ++i)
    if (!is_library_frame(t.frames[i])) parts.push_back(where(t.frames[i]));
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : " <- ") + p;
  return out;
}

std::string user_frame_of(const ThreadStack& t) {
  for (const auto& f : t.frames)
    if (!is_library_frame(f)) return fmt::format("{}:{} in {}", f.file, f.line, f.name);
  return "";
}

bool waits_on_others(const ThreadStack& t) {
  // Only the frames inside libraries count: a user's function called
  // "barrier" does not make a collective.
  for (const auto& f : t.frames) {
    if (!is_library_frame(f)) return false;
    if (is_collective_frame(f)) return true;
  }
  return false;
}

std::string frames_key(const ThreadStack& t) {
  std::string key;
  for (const auto& f : t.frames)
    if (!unnamed(f)) key += fmt::format("{}\x1f{}\x1f{}\x1e", f.name, f.path, f.line);
  return key;
}

std::string rank_and_host(const RankStack& s) {
  return s.host.empty() ? fmt::format("rank {} (pid {})", s.rank, s.pid)
                        : fmt::format("rank {} on {} (pid {})", s.rank, s.host, s.pid);
}

std::string ranks_word(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", rank_ranges(ranks));
}
}  // namespace

const ThreadStack* RankStack::main_thread() const {
  for (const auto& t : threads)
    if (t.main) return &t;
  return threads.empty() ? nullptr : &threads.front();
}

bool is_library_frame(const StackFrame& f) {
  const auto& p = f.path.empty() ? f.file : f.path;
  if (p.empty()) return true;  // native, without a source file
  bool python_source = p.size() > 3 && p.compare(p.size() - 3, 3, ".py") == 0;
  return !python_source || p.front() == '<' || contains(p, "/site-packages/") || contains(p, "/dist-packages/") ||
         contains(p, "/lib/python3") || contains(p, "/lib/python2") || contains(p, "/lib64/python3");
}

bool is_collective_frame(const StackFrame& f) {
  static constexpr std::string_view kPaths[] = {"torch/distributed/", "torch/nn/parallel/", "deepspeed/comm/",
                                                "mpi4py/"};
  static constexpr std::string_view kNames[] = {"nccl",      "gloo",           "all_reduce", "allreduce", "all_gather",
                                                "allgather", "reduce_scatter", "broadcast",  "barrier",   "MPI_"};
  const auto& p = f.path.empty() ? f.file : f.path;
  for (auto part : kPaths)
    if (contains(p, part)) return true;
  for (auto part : kNames)
    if (contains(f.name, part)) return true;
  return false;
}

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

StackReport analyse_stacks(const std::vector<RankStack>& stacks) {
  StackReport report;
  report.ranks = static_cast<int>(stacks.size());
  std::map<std::string, StackGroup> by_stack;
  std::vector<std::string> order;
  for (const auto& s : stacks) {
    const auto* t = s.read() ? s.main_thread() : nullptr;
    if (t == nullptr) {
      report.unreadable.push_back(s.rank);
      continue;
    }
    auto key = frames_key(*t);
    auto [it, fresh] = by_stack.try_emplace(key);
    if (fresh) {
      it->second.summary = summary_of(*t);
      it->second.user_frame = user_frame_of(*t);
      it->second.in_collective = waits_on_others(*t);
      order.push_back(key);
    }
    it->second.ranks.push_back(s.rank);
  }
  for (const auto& key : order) report.groups.push_back(std::move(by_stack[key]));
  for (auto& g : report.groups) std::sort(g.ranks.begin(), g.ranks.end());
  std::stable_sort(report.groups.begin(), report.groups.end(), [](const StackGroup& a, const StackGroup& b) {
    return a.ranks.size() != b.ranks.size() ? a.ranks.size() > b.ranks.size() : a.ranks.front() < b.ranks.front();
  });

  // Where in the user's code each group is: groups at the same line of it
  // (one inside the collective, one entering it) are one place.
  std::map<std::string, std::size_t> place_size;
  std::map<std::string, bool> place_waits;
  for (const auto& g : report.groups) {
    place_size[g.user_frame] += g.ranks.size();
    place_waits[g.user_frame] = place_waits[g.user_frame] || g.in_collective;
  }
  if (place_size.size() > 1) {
    bool some_wait = false;
    bool some_not = false;
    for (const auto& [place, waits] : place_waits) (waits ? some_wait : some_not) = true;
    std::size_t largest = 0;
    for (const auto& [place, size] : place_size) largest = std::max(largest, size);
    bool all_equal = std::all_of(place_size.begin(), place_size.end(), [&](auto& p) { return p.second == largest; });
    for (auto& g : report.groups) {
      if (some_wait && some_not)
        g.odd = !place_waits[g.user_frame];  // the others wait for these
      else
        g.odd = !all_equal && place_size[g.user_frame] < largest;
    }
  }
  for (const auto& g : report.groups)
    if (g.odd) report.odd_ranks.insert(report.odd_ranks.end(), g.ranks.begin(), g.ranks.end());
  std::sort(report.odd_ranks.begin(), report.odd_ranks.end());

  // The verdict: one sentence.
  auto by_rank = [&](int rank) -> const RankStack* {
    for (const auto& s : stacks)
      if (s.rank == rank) return &s;
    return nullptr;
  };
  std::vector<int> others;
  std::string others_where;
  for (const auto& g : report.groups)
    if (!g.odd) {
      others.insert(others.end(), g.ranks.begin(), g.ranks.end());
      if (others_where.empty()) others_where = g.summary.substr(0, g.summary.find(" <- "));
    }
  std::sort(others.begin(), others.end());
  if (report.groups.empty()) {
    report.verdict = report.unreadable.empty() ? "no rank to read" : "no rank's stack could be read";
  } else if (!report.odd_ranks.empty()) {
    std::vector<std::string> odd;
    for (const auto& g : report.groups) {
      if (!g.odd) continue;
      const auto* first = by_rank(g.ranks.front());
      std::string who = g.ranks.size() == 1 && first != nullptr ? rank_and_host(*first) : ranks_word(g.ranks);
      odd.push_back(fmt::format("{} at {}", who, g.user_frame.empty() ? g.summary : g.user_frame));
    }
    std::string list;
    for (const auto& o : odd) list += (list.empty() ? "" : "; ") + o;
    report.verdict = fmt::format("the odd {} out: {}; {} {} in {}", odd.size() == 1 ? "one" : "ones", list,
                                 others.size() == 1 ? "the other rank" : fmt::format("the other {}", others.size()),
                                 others.size() == 1 ? "is" : "are", others_where);
  } else if (report.groups.size() == 1 || place_size.size() == 1) {
    report.verdict = fmt::format(
        "every rank is at the same place ({}): none is the odd one out; a collective that never "
        "completes points at the network or a device",
        report.groups.front().summary.substr(0, report.groups.front().summary.find(" <- ")));
  } else {
    report.verdict = fmt::format("the ranks are at {} places of equal size: no odd one out", place_size.size());
  }
  if (!report.unreadable.empty()) report.verdict += fmt::format(" ({} not read)", ranks_word(report.unreadable));
  return report;
}

std::string format_stack_report(const StackReport& report, const std::vector<RankStack>& stacks) {
  std::string out;
  std::map<int, const RankStack*> by_rank;
  for (const auto& s : stacks) by_rank[s.rank] = &s;
  for (const auto& g : report.groups) {
    std::string hosts;
    std::set<std::string> seen;
    for (int r : g.ranks)
      if (by_rank.count(r) && !by_rank[r]->host.empty() && seen.insert(by_rank[r]->host).second)
        hosts += (hosts.empty() ? "" : ",") + by_rank[r]->host;
    out += fmt::format("  {}{} ({} of {}): {}{}\n", ranks_word(g.ranks), hosts.empty() ? "" : " on " + hosts,
                       g.ranks.size(), report.ranks, g.summary, g.odd ? "   <- odd one out" : "");
  }
  for (int r : report.unreadable) {
    const auto* s = by_rank.count(r) ? by_rank[r] : nullptr;
    out += fmt::format("  rank {}: not read: {}\n", r, s ? s->error : "?");
  }
  out += fmt::format("  verdict: {}\n", report.verdict);
  return out;
}

std::string format_rank_stack(const RankStack& s) {
  std::string out = fmt::format("rank {}{} pid {} ({})\n", s.rank, s.host.empty() ? "" : " on " + s.host, s.pid,
                                s.tool.empty() ? "no tool" : s.tool);
  if (!s.read()) return out + fmt::format("not read: {}\n", s.error);
  for (const auto& t : s.threads) {
    out += fmt::format("\nThread {}{}{}:\n", t.tid, t.name.empty() ? "" : fmt::format(" \"{}\"", t.name),
                       t.main ? " (main)" : "");
    for (const auto& f : t.frames)
      out += f.file.empty() ? fmt::format("    {}\n", f.name) : fmt::format("    {} ({}:{})\n", f.name, f.path, f.line);
  }
  return out;
}

json rank_stacks_to_json(const std::vector<RankStack>& stacks) {
  json ranks = json::array();
  for (const auto& s : stacks) {
    json threads = json::array();
    for (const auto& t : s.threads) {
      json frames = json::array();
      for (const auto& f : t.frames)
        frames.push_back({{"name", f.name}, {"file", f.file}, {"path", f.path}, {"line", f.line}});
      threads.push_back({{"name", t.name}, {"tid", t.tid}, {"main", t.main}, {"frames", std::move(frames)}});
    }
    ranks.push_back({{"rank", s.rank},
                     {"host", s.host},
                     {"pid", s.pid},
                     {"tool", s.tool},
                     {"error", s.read() ? json(nullptr) : json(s.error)},
                     {"threads", std::move(threads)}});
  }
  return ranks;
}

std::string fit_stacks(std::vector<RankStack> stacks, std::size_t limit) {
  auto text = rank_stacks_to_json(stacks).dump();
  if (text.size() <= limit) return text;
  for (auto& s : stacks) {  // the main thread is what the report groups by
    if (const auto* main = s.main_thread()) {
      auto keep = *main;
      s.threads = {std::move(keep)};
    }
  }
  for (std::size_t frames = 64; frames > 0; frames /= 2) {
    for (auto& s : stacks)
      for (auto& t : s.threads)
        if (t.frames.size() > frames) t.frames.resize(frames);
    text = rank_stacks_to_json(stacks).dump();
    if (text.size() <= limit) return text;
  }
  for (auto& s : stacks) s.threads.clear(), s.error = "its stack did not fit in the node's answer";
  return rank_stacks_to_json(stacks).dump();
}

std::vector<RankStack> rank_stacks_from_json(const json& ranks) {
  std::vector<RankStack> out;
  try {
    for (const auto& r : ranks) {
      RankStack s;
      s.rank = r.at("rank").get<int>();
      s.host = r.at("host").get<std::string>();
      s.pid = r.at("pid").get<int>();
      s.tool = r.at("tool").get<std::string>();
      if (!r.at("error").is_null()) s.error = r.at("error").get<std::string>();
      for (const auto& t : r.at("threads")) {
        ThreadStack th;
        th.name = t.at("name").get<std::string>();
        th.tid = t.at("tid").get<long long>();
        th.main = t.at("main").get<bool>();
        for (const auto& f : t.at("frames"))
          th.frames.push_back({f.at("name").get<std::string>(), f.at("file").get<std::string>(),
                               f.at("path").get<std::string>(), f.at("line").get<int>()});
        s.threads.push_back(std::move(th));
      }
      out.push_back(std::move(s));
    }
  } catch (const json::exception& e) {
    throw Error(fmt::format("a node's stacks are not what sgpu sends: {}", e.what()));
  }
  return out;
}

json stacks_json(const StackReport& report, const std::vector<RankStack>& stacks) {
  json groups = json::array();
  for (const auto& g : report.groups)
    groups.push_back({{"ranks", g.ranks},
                      {"stack", g.summary},
                      {"user_frame", g.user_frame.empty() ? json(nullptr) : json(g.user_frame)},
                      {"in_collective", g.in_collective},
                      {"odd", g.odd}});
  return {{"world_size", report.ranks},      {"groups", std::move(groups)}, {"odd_ones_out", report.odd_ranks},
          {"unreadable", report.unreadable}, {"verdict", report.verdict},   {"ranks", rank_stacks_to_json(stacks)}};
}

}  // namespace sgpu::launcher
