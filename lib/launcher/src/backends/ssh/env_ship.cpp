// --sync-env for the ssh backend (env_ship.hpp).
#include "backends/ssh/env_ship.hpp"

#include <unistd.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/process/command.hpp"

namespace sgpu::launcher::ssh {
namespace fs = std::filesystem;

namespace {

std::string last_line(const std::string& text) {
  auto end = text.find_last_not_of("\r\n ");
  if (end == std::string::npos) return "";
  auto start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1,
                     end + 1 - (start == std::string::npos ? 0 : start + 1));
}

// Asks every node at once what it has (python<minor>, ~/.cache/sgpu); each
// ssh bounded by its connect timeout and the time a Python start and a
// directory listing take. Answers land in `results` when `io` runs.
void ask_nodes(boost::asio::io_context& io, const std::vector<NodeAssignment>& nodes, const SshOptions& opts,
               const std::string& minor, const env::Environment& inherited, std::vector<CommandResult>& results) {
  results.assign(nodes.size(), {});
  auto limit = std::chrono::seconds(opts.connect_timeout_s + 60);
  for (std::size_t k = 0; k < nodes.size(); ++k)
    run_command(io, ssh_argv(opts, nodes[k].entry, env_probe_command(minor)), inherited, limit, 16U << 20,
                [&results, k](CommandResult r) { results[k] = std::move(r); });
}

}  // namespace

std::string job_interpreter(const JobSpec& spec, const env::Environment& inherited) {
  std::string python = spec.python;
  std::string from = "--python";
  if (python.empty()) {
    if (auto it = inherited.find("SGPU_PYTHON"); it != inherited.end() && !it->second.empty()) {
      python = it->second;
      from = "SGPU_PYTHON";
    } else {
      python = "python3";
      from = "the default";
    }
  }
  auto path = python.find('/') == std::string::npos ? find_on_path(python, inherited) : python;
  if (path.empty() || ::access(path.c_str(), X_OK) != 0)
    throw Error(fmt::format("--sync-env replicates the job's interpreter, and {} ({}) is not an executable here; "
                            "pass --python PATH",
                            python, from),
                2);
  return fs::absolute(path).lexically_normal().string();
}

EnvSyncState prepare_env_sync(const JobSpec& spec, const env::Environment& inherited,
                              const std::vector<NodeAssignment>& nodes, const SshOptions& opts, bool dry_run) {
  EnvSyncState state;
  auto interpreter = job_interpreter(spec, inherited);
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
    if (!minor.empty()) ask_nodes(io, nodes, opts, minor, inherited, answers);
    io.run();
  }
  state.lock = read_inspection(inspection, interpreter, inherited);
  state.wheel_cache = wheel_cache_dir(inherited);
  const auto& lock = state.lock;
  if (lock.minor != minor) {
    boost::asio::io_context io;
    ask_nodes(io, nodes, opts, lock.minor, inherited, answers);
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
      why = fmt::format("node {} did not say what it has in {} s", host, opts.connect_timeout_s + 60);
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
                         s.bytes, env_python(state.lock, state.probes[k].home)});
  }
  return out;
}

std::vector<std::string> make_env_tarballs(const EnvSyncState& state, const std::string& dir) {
  const auto& lock = state.lock;
  std::vector<std::string> out(state.probes.size());
  std::map<std::string, std::string> made;  // what goes in -> its tar
  auto staging = fs::path(dir) / "env-sync";
  for (std::size_t k = 0; k < state.probes.size(); ++k) {
    if (state.probes[k].env_ready) continue;
    const auto& ship = state.shipments[k];
    std::string signature = ship.uv ? "uv\n" : "";
    for (const auto* p : ship.wheels) signature += p->wheel + "\n";
    if (auto it = made.find(signature); it != made.end()) {
      out[k] = it->second;
      continue;
    }
    fs::create_directories(staging / "envs");
    auto list = staging / "envs" / (lock.hash + ".txt");
    {
      std::ofstream f(list, std::ios::trunc);
      for (const auto& p : lock.packages) f << "wheels/" << p.wheel << "\n";
      if (!f) throw Error(fmt::format("--sync-env: cannot write {}", list.string()), 1);
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

}  // namespace sgpu::launcher::ssh
