// Non-file sources of a job spec, and the merge of all of them.
#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>

#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/spec/spec_load.hpp"

namespace sgpu::launcher {
namespace {

void add_text(Layer& layer, const KeyInfo& key, const std::string& path, const std::string& text, Origin origin) {
  auto made = setting_from_text(key, path, text, std::move(origin));
  if (auto* error = std::get_if<std::string>(&made)) {
    layer.errors.push_back(std::move(*error));
    return;
  }
  auto& s = std::get<Setting>(made);
  if (auto problem = check_setting(key, s); !problem.empty())
    layer.errors.push_back(std::move(problem));
  else
    layer.settings.push_back(std::move(s));
}

// Keys on either side of a pair where setting one side replaces the other.
struct Exclusive {
  std::vector<std::string_view> a, b;
};
const std::array<Exclusive, 2> kExclusive = {{
    {{"resources.gpus", "resources.gpus_per_node"}, {"resources.nproc"}},
    {{"job.module"}, {"job.no_python"}},
}};

// A bool only claims its side when true: --set job.module=false says nothing
// against a file's no_python = true.
bool claims(const Setting& s) { return !std::holds_alternative<bool>(s.value) || std::get<bool>(s.value); }

bool contains(const std::vector<std::string_view>& keys, std::string_view key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

struct Entry {
  Setting setting;
  std::size_t layer = 0;
};
using Merged = std::map<std::string, Entry, std::less<>>;

const Setting* get(const Merged& m, std::string_view key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second.setting;
}

// "job.toml:3:1: resources.gpus and --nproc", "--gpus and --nproc": two
// settings in one sentence, a file position first where there is one.
std::string both(const Setting& a, const Setting& b) {
  if (a.origin.kind == Origin::Kind::File) return fmt::format("{} and {}", a.subject(), b.label());
  if (b.origin.kind == Origin::Kind::File)
    return fmt::format("{}:{}:{}: {} and {}", b.origin.name, b.origin.line, b.origin.column, a.label(), b.key);
  return fmt::format("{} and {}", a.label(), b.label());
}

void check_whole(const Merged& m, const JobSpec& spec, std::vector<std::string>& errors,
                 std::vector<std::string>& notes) {
  const Setting* gpus = get(m, "resources.gpus");
  const Setting* per_node = get(m, "resources.gpus_per_node");
  const Setting* nproc = get(m, "resources.nproc");
  const Setting* nodes = get(m, "resources.nodes");
  for (const auto* gpu_side : {gpus, per_node})
    if (gpu_side && nproc)
      errors.push_back(
          fmt::format("{} exclude each other: {} starts one rank per GPU, {} starts CPU ranks; give one "
                      "of them",
                      both(*gpu_side, *nproc), gpu_side->key.substr(10), nproc->key.substr(10)));
  const Setting* module = get(m, "job.module");
  const Setting* no_python = get(m, "job.no_python");
  if (module && no_python && claims(*module) && claims(*no_python))
    errors.push_back(fmt::format("{} exclude each other: a module runs with Python, --no-python runs a program",
                                 both(*module, *no_python)));
  std::string nodes_label = nodes ? nodes->label() : "resources.nodes";
  if (gpus && per_node && *spec.gpus != spec.nodes * *spec.gpus_per_node)
    errors.push_back(fmt::format("{} disagree: {} node{} x {} GPUs is {}, not {}", both(*gpus, *per_node), spec.nodes,
                                 spec.nodes == 1 ? "" : "s", *spec.gpus_per_node, spec.nodes * *spec.gpus_per_node,
                                 *spec.gpus));
  else if (gpus && *spec.gpus % spec.nodes != 0)
    errors.push_back(
        fmt::format("{}: {} GPUs do not split evenly over {} nodes ({}); give a multiple of {} or "
                    "resources.gpus_per_node",
                    gpus->where(), *spec.gpus, spec.nodes, nodes_label, spec.nodes));
  if (const auto* rank = get(m, "rendezvous.node_rank"); rank && *spec.rendezvous.node_rank >= spec.nodes)
    errors.push_back(
        fmt::format("{}: must be below the number of nodes, {} ({})", rank->where(), spec.nodes, nodes_label));
  const Setting* type = get(m, "resources.gpu_type");
  if (type && nproc && (spec.nproc || spec.nproc_mode == "cpu"))
    errors.push_back(fmt::format("{} needs --gpus N (resources.gpus): with {} the ranks run on CPUs", type->where(),
                                 nproc->label()));
  // Settings that would do nothing are said, not dropped silently.
  auto unused = [&](std::string_view prefix, bool used, const std::string& why) {
    for (const auto& [key, entry] : m)
      if (key.starts_with(prefix) && !used) {
        notes.push_back(fmt::format("{} is not used: {}", entry.setting.label(), why));
        return;
      }
  };
  // A backend's table with another backend chosen: said once per table.
  std::vector<std::string_view> said;
  for (const auto& key : spec_keys()) {
    if (key.backend.empty() || key.backend == spec.backend ||
        std::find(said.begin(), said.end(), key.backend) != said.end())
      continue;
    said.push_back(key.backend);
    unused(std::string(key.backend) + ".", false, fmt::format("the backend is {}, not {}", spec.backend, key.backend));
  }
  // rendezvous.endpoint on one node is an error of its own (sgpu launch says why).
  for (auto key :
       {"rendezvous.secret_file", "rendezvous.join_timeout", "rendezvous.heartbeat_timeout", "rendezvous.master_addr"})
    unused(key, spec.nodes > 1, "the job runs on one node");
}

}  // namespace

Layer environment_layer(const env::Environment& environment) {
  Layer layer;
  for (const auto& key : spec_keys()) {
    if (key.env.empty()) continue;
    auto it = environment.find(std::string(key.env));
    if (it == environment.end() || it->second.empty()) continue;
    add_text(layer, key, std::string(key.path), it->second, {Origin::Kind::Environment, std::string(key.env)});
  }
  return layer;
}

Layer command_line_layer(const std::vector<FlagValue>& flags, const std::vector<std::string>& entrypoint_words) {
  Layer layer;
  for (const auto& f : flags) {
    Origin origin{Origin::Kind::Flag, f.flag};
    if (f.items.empty())
      add_text(layer, *f.key, std::string(f.key->path), f.text, origin);
    else
      layer.settings.push_back({std::string(f.key->path), f.items, env::shell_join(f.items), origin});
  }
  if (!entrypoint_words.empty()) {
    Origin origin{Origin::Kind::Flag, "the entrypoint"};
    layer.settings.push_back({"job.entrypoint", entrypoint_words.front(), entrypoint_words.front(), origin});
    std::vector<std::string> args(entrypoint_words.begin() + 1, entrypoint_words.end());
    origin.name = "the entrypoint's arguments";
    layer.settings.push_back({"job.args", args, env::shell_join(args), origin});
  }
  return layer;
}

ResolvedSpec resolve_spec(const std::vector<Layer>& layers) {
  std::vector<std::string> errors;
  Merged merged;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    errors.insert(errors.end(), layers[i].errors.begin(), layers[i].errors.end());
    for (const auto& s : layers[i].settings) {
      for (const auto& pair : kExclusive) {
        const auto* other = contains(pair.a, s.key) ? &pair.b : contains(pair.b, s.key) ? &pair.a : nullptr;
        if (other == nullptr || !claims(s)) continue;
        std::erase_if(merged, [&](const auto& kv) { return kv.second.layer < i && contains(*other, kv.first); });
      }
      merged.insert_or_assign(s.key, Entry{s, i});
    }
  }

  ResolvedSpec out;
  for (const auto& key : spec_keys()) {
    for (const auto& [path, entry] : merged) {
      if (find_key(path) != &key) continue;
      key.apply(out.spec, entry.setting);
      out.spec.origins[path] = entry.setting.where();
      out.settings.push_back(entry.setting);
    }
  }
  check_whole(merged, out.spec, errors, out.notes);
  if (errors.size() == 1) throw Error(errors.front());
  if (!errors.empty()) {
    std::string all = fmt::format("{} problems in the job spec:", errors.size());
    for (const auto& e : errors) all += "\n  " + e;
    throw Error(all);
  }
  return out;
}

}  // namespace sgpu::launcher
