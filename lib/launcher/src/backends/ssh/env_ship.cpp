// --sync-env for the ssh backend (env_ship.hpp).
#include "backends/ssh/env_ship.hpp"

#include <unistd.h>
#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "backends/ssh/ssh_settings.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/process/command.hpp"

namespace sgpu::launcher::ssh {
namespace fs = std::filesystem;

namespace {

// Runs `command` on every node at once over ssh, each bounded by its
// connect timeout and `work`; the answers in node order once `io` has run.
void run_on_nodes(boost::asio::io_context& io, const std::vector<NodeAssignment>& nodes, const SshOptions& opts,
                  const std::string& command, const env::Environment& inherited, std::chrono::seconds work,
                  std::vector<CommandResult>& results) {
  results.assign(nodes.size(), {});
  for (std::size_t k = 0; k < nodes.size(); ++k)
    run_command(io, ssh_argv(opts, nodes[k].entry, command), inherited,
                std::chrono::seconds(opts.connect_timeout_s) + work, 16U << 20,
                [&results, k](CommandResult r) { results[k] = std::move(r); });
}

// What a node is given to answer what it has: a Python start and a listing.
constexpr std::chrono::seconds kProbeWork{60};

}  // namespace

EnvSyncState prepare_env_sync(const JobSpec& spec, const env::Environment& inherited, const std::string& cwd,
                              const std::vector<NodeAssignment>& nodes, const SshOptions& opts, bool dry_run) {
  EnvSyncState state;
  auto interpreter = resolve_python(spec, inherited, cwd);
  // The nodes are asked while the interpreter here describes itself: the
  // launch waits for the slower of the two, not both. Only a Python version
  // the interpreter's files do not tell needs the description first.
  auto minor = interpreter_minor(interpreter);
  std::vector<CommandResult> answers;
  CommandResult inspection;
  {
    boost::asio::io_context io;
    run_command(io, inspect_argv(interpreter, inherited, !dry_run), inherited, std::chrono::minutes(10), 64U << 20,
                [&inspection](CommandResult r) { inspection = std::move(r); });
    if (!minor.empty()) run_on_nodes(io, nodes, opts, env_probe_command(minor), inherited, kProbeWork, answers);
    io.run();
  }
  state.lock = read_inspection(inspection, interpreter, inherited);
  state.wheel_cache = wheel_cache_dir(inherited);
  const auto& lock = state.lock;
  if (lock.minor != minor) {
    boost::asio::io_context io;
    run_on_nodes(io, nodes, opts, env_probe_command(lock.minor), inherited, kProbeWork, answers);
    io.run();
  }
  for (const auto& skipped : lock.skipped)
    diagnostic("sgpu: warning: --sync-env: {} is outside site-packages; the nodes' copies go without it\n", skipped);
  if (!lock.uv.empty()) {
    std::error_code ec;
    state.uv_bytes = fs::file_size(lock.uv, ec);
  }
  std::vector<std::string> refusals;
  int code = 1;
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const auto& host = nodes[k].entry.host;
    const auto& a = answers[k];
    std::string why;
    std::optional<NodeProbe> probe;
    if (!a.status) {
      why = fmt::format("cannot run ssh for {}: {}", host, a.start_error);
    } else if (a.timed_out) {
      why = fmt::format("node {} did not say what it has in {} s", host, opts.connect_timeout_s + kProbeWork.count());
    } else if (!a.status->success()) {
      auto detail = last_line(a.err);
      if (a.status->code == 255) {
        why = fmt::format("cannot reach {} over ssh{}", host, detail.empty() ? "" : ": " + detail);
        code = 255;
      } else {
        why = fmt::format("asking {} what it has failed ({}){}", host, a.status->describe(),
                          detail.empty() ? "" : ": " + detail);
      }
    } else if (!(probe = parse_node_probe(a.out, why))) {
      why = fmt::format("node {} could not say what it has: {}", host, why);
    } else {
      settle_probe(lock, *probe);
      why = judge_node(lock, *probe, host);
    }
    if (!why.empty()) {
      refusals.push_back(why);
      continue;
    }
    state.shipments.push_back(shipment_for(lock, *probe, state.uv_bytes));
    state.probes.push_back(std::move(*probe));
  }
  if (!refusals.empty()) {
    std::string text = "--sync-env: " + refusals.front();
    for (std::size_t i = 1; i < refusals.size(); ++i) text += "\n  " + refusals[i];
    throw Error(text + (refusals.size() > 1 ? "\nno node was started" : "; no node was started"), code);
  }
  return state;
}

LaunchPlan::EnvSync env_sync_record(const EnvSyncState& state, const std::vector<NodeAssignment>& nodes) {
  LaunchPlan::EnvSync out;
  out.hash = state.lock.hash;
  out.python = state.lock.version;
  out.packages = static_cast<int>(state.lock.packages.size());
  for (std::size_t k = 0; k < nodes.size() && k < state.probes.size(); ++k) {
    const auto& s = state.shipments[k];
    out.nodes.push_back({nodes[k].entry.host, state.probes[k].env_ready, static_cast<int>(s.wheels.size()), s.uv,
                         s.bytes, env_python(state.lock, state.probes[k].home),
                         state.probes[k].env_ready ? "present" : "shipped", 0});
  }
  return out;
}

std::vector<std::string> make_env_tarballs(const EnvSyncState& state, const std::string& dir) {
  const auto& lock = state.lock;
  std::vector<std::string> out(state.probes.size());
  std::map<std::string, std::string> made;  // what goes in -> its tar
  auto staging = fs::path(dir) / "env-sync";
  // Every tar carries the environment's wheel list (what the node installs).
  fs::create_directories(staging / "envs");
  auto list = staging / "envs" / (lock.hash + ".txt");
  {
    std::ofstream f(list, std::ios::trunc);
    for (const auto& p : lock.packages) f << "wheels/" << p.wheel << "\n";
    if (!f) throw Error(fmt::format("--sync-env: cannot write {}", list.string()), 1);
  }
  for (std::size_t k = 0; k < state.probes.size(); ++k) {
    if (state.probes[k].env_ready) continue;
    const auto& ship = state.shipments[k];
    std::string signature = ship.uv ? "uv\n" : "";
    for (const auto* p : ship.wheels) signature += p->wheel + "\n";
    if (auto it = made.find(signature); it != made.end()) {
      out[k] = it->second;
      continue;
    }
    auto tar = (staging / fmt::format("node-{}.tar", made.size())).string();
    auto members = (staging / fmt::format("node-{}.files", made.size())).string();
    {
      std::ofstream f(members, std::ios::trunc);
      for (const auto* p : ship.wheels) f << "wheels/" << p->wheel << "\n";
    }
    auto cache = fs::path(state.wheel_cache);
    auto tar_program = find_on_path("tar");
    if (tar_program.empty()) throw Error("--sync-env needs tar on the PATH", 1);
    std::vector<std::string> argv{tar_program,
                                  "-cf",
                                  tar,
                                  "-C",
                                  staging.string(),
                                  "envs/" + lock.hash + ".txt",
                                  "-C",
                                  cache.parent_path().string(),
                                  "-T",
                                  members};
    if (ship.uv) {
      auto uv = fs::path(lock.uv);
      auto name = uv_remote_name(lock);
      argv.insert(argv.end(), {"-C", uv.parent_path().string(), "--transform",
                               fmt::format("s|^{}$|{}|", uv.filename().string(), name), uv.filename().string()});
    }
    boost::asio::io_context io;
    CommandResult result;
    run_command(io, argv, {}, std::chrono::minutes(10), 64U << 10,
                [&result](CommandResult r) { result = std::move(r); });
    io.run();
    if (!result.ok())
      throw Error(fmt::format("--sync-env: packing the environment's wheels failed ({}): {}",
                              result.status ? result.status->describe() : result.start_error, last_line(result.err)),
                  1);
    made[signature] = tar;
    out[k] = tar;
  }
  return out;
}

namespace {

std::string mib(long long kib) { return fmt::format("{:.1f} MiB", static_cast<double>(kib) / 1024.0); }

std::string when(long long t, long long now) {
  auto ago = now - t;
  std::string rel = ago < 120      ? fmt::format("{}s ago", std::max(0LL, ago))
                    : ago < 7200   ? fmt::format("{}m ago", ago / 60)
                    : ago < 172800 ? fmt::format("{}h ago", ago / 3600)
                                   : fmt::format("{}d ago", ago / 86400);
  std::tm tm{};
  auto tt = static_cast<std::time_t>(t);
  ::gmtime_r(&tt, &tm);
  std::array<char, 32> day{};
  std::strftime(day.data(), day.size(), "%Y-%m-%d %H:%M", &tm);
  return fmt::format("{} UTC ({})", day.data(), rel);
}

}  // namespace

std::string envs_text(const std::vector<std::pair<std::string, NodeEnvs>>& hosts, bool prune, long long now) {
  std::string out;
  int removed = 0;
  long long removed_kib = 0, wheels_kib = 0;
  int wheels_removed = 0;
  for (const auto& [host, node] : hosts) {
    long long total = 0;
    for (const auto& e : node.envs) total += e.removed ? 0 : e.kib;
    auto left = std::count_if(node.envs.begin(), node.envs.end(), [](const CachedEnv& e) { return !e.removed; });
    out += fmt::format("{} ({}/.cache/sgpu): {} environment{}, {}; wheels {}\n", host, node.home, left,
                       left == 1 ? "" : "s", mib(total), mib(node.wheels_kib));
    for (const auto& e : node.envs) {
      std::string state = e.removed ? "removed" : e.in_use ? "in use" : prune ? "kept: used recently" : "";
      out += fmt::format("  {}  built {}  used {}  {:>10}  {:>3} packages{}\n", e.hash, when(e.built, now),
                         when(e.used, now), mib(e.kib), e.packages, state.empty() ? "" : "  " + state);
      if (e.removed) {
        ++removed;
        removed_kib += e.kib;
      }
    }
    wheels_removed += node.wheels_removed;
    wheels_kib += node.wheels_removed_kib;
  }
  if (prune)
    out += fmt::format("removed {} environment{} ({}) and {} wheel{} ({}) on {} host{}\n", removed,
                       removed == 1 ? "" : "s", mib(removed_kib), wheels_removed, wheels_removed == 1 ? "" : "s",
                       mib(wheels_kib), hosts.size(), hosts.size() == 1 ? "" : "s");
  return out;
}

EnvsAnswer envs_command(const JobSpec& spec, const env::Environment& inherited,
                        const std::vector<NodeAssignment>& nodes, const SshOptions& opts) {
  const auto& s = settings(spec);
  bool prune = s.envs == "prune";
  long long unused_for = s.envs_unused_for.required("--envs-unused-for").count();
  std::vector<CommandResult> results;
  {
    boost::asio::io_context io;
    run_on_nodes(io, nodes, opts, env_maintenance_command(prune, unused_for), inherited, std::chrono::seconds(120),
                 results);
    io.run();
  }
  std::vector<std::pair<std::string, NodeEnvs>> answered;
  std::vector<std::string> failures;
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const auto& host = nodes[k].entry.host;
    const auto& r = results[k];
    std::string why;
    std::optional<NodeEnvs> envs;
    if (!r.ok())
      why = r.status ? fmt::format("{}{}", r.timed_out ? "no answer" : r.status->describe(),
                                   last_line(r.err).empty() ? "" : ": " + last_line(r.err))
                     : r.start_error;
    else if (!(envs = parse_env_listing(r.out, why)))
      why = "its answer was not a listing (" + why + ")";
    if (envs)
      answered.emplace_back(host, std::move(*envs));
    else
      failures.push_back(fmt::format("sgpu: error: --envs: {}: {}", host, why));
  }
  EnvsAnswer out;
  out.exit_code = failures.empty() ? 0 : 1;
  auto now = static_cast<long long>(std::time(nullptr));
  if (spec.output_format == "json") {
    auto doc = nlohmann::ordered_json{{"action", s.envs}, {"hosts", nlohmann::ordered_json::array()}};
    for (const auto& [host, node] : answered) {
      auto envs = nlohmann::ordered_json::array();
      for (const auto& e : node.envs)
        envs.push_back({{"hash", e.hash},
                        {"built", e.built},
                        {"used", e.used},
                        {"kib", e.kib},
                        {"packages", e.packages},
                        {"in_use", e.in_use},
                        {"removed", e.removed}});
      doc["hosts"].push_back({{"host", host},
                              {"home", node.home},
                              {"environments", envs},
                              {"wheels_kib", node.wheels_kib},
                              {"wheels_removed", node.wheels_removed},
                              {"wheels_removed_kib", node.wheels_removed_kib}});
    }
    doc["errors"] = failures;
    out.text = doc.dump(2) + "\n";
  } else {
    out.text = envs_text(answered, prune, now);
  }
  for (const auto& f : failures) diagnostic("{}\n", f);
  return out;
}

}  // namespace sgpu::launcher::ssh
