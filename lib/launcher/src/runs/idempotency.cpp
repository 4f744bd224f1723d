#include "sgpu/launcher/runs/idempotency.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

namespace {
constexpr const char* kKeyLockDir = ".keys";  // a dot: run_ids() never lists it

template <class T>
ordered_json or_null(const std::optional<T>& v) {
  return v ? ordered_json(*v) : ordered_json(nullptr);
}

// "train.py", "-m pkg.train", "--no-python ./prog": as it was launched.
std::string entrypoint_text(const json& entry) {
  if (!entry.is_object()) return "(none)";
  auto kind = entry.value("kind", "");
  auto target = entry.value("target", "");
  if (kind == "module") return "-m " + target;
  if (kind == "executable") return "--no-python " + target;
  return target;
}

std::string args_text(const json& args) {
  if (!args.is_array() || args.empty()) return "(none)";
  std::string out;
  for (const auto& a : args)
    out += (out.empty() ? "" : " ") + env::shell_quote(a.is_string() ? a.get<std::string>() : a.dump());
  return out;
}

std::string value_text(const json& v) {
  if (v.is_null()) return "unset";
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string difference(const std::string& field, const std::string& before, const std::string& now) {
  return fmt::format("{}: {} before, {} now", field, before, now);
}

// 64-bit FNV-1a: the lock file's name, whatever characters the key holds.
// Two keys that hash alike only share a lock.
std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::optional<RunInfo> newest_with(const std::string& root, const char* field, const std::string& value) {
  for (auto& run : list_runs(root)) {
    auto it = run.record.find(field);
    if (it != run.record.end() && it->is_string() && it->get<std::string>() == value) return std::move(run);
  }
  return std::nullopt;
}
}  // namespace

KeyAction key_action(std::optional<RunState> newest) {
  if (!newest) return KeyAction::Start;
  switch (*newest) {
    case RunState::Running:
      return KeyAction::Follow;
    case RunState::Succeeded:
      return KeyAction::Reuse;
    case RunState::Unknown:
      return KeyAction::Refuse;
    case RunState::Failed:
    case RunState::TimedOut:
    case RunState::Hung:
    case RunState::Cancelled:
    case RunState::Lost:
    case RunState::Preempted:
      break;
  }
  return KeyAction::Start;
}

ordered_json requested_resources(const JobSpec& spec) {
  ordered_json nproc = spec.nproc                ? ordered_json(*spec.nproc)
                       : spec.nproc_mode.empty() ? ordered_json(nullptr)
                                                 : ordered_json(spec.nproc_mode);
  return {{"backend", spec.backend},
          {"nodes", spec.nodes},
          {"gpus", or_null(spec.gpus)},
          {"gpus_per_node", or_null(spec.gpus_per_node)},
          {"nproc", nproc},
          {"gpu_type", spec.gpu_type.empty() ? ordered_json(nullptr) : ordered_json(spec.gpu_type)}};
}

ordered_json work_identity(const JobSpec& spec) {
  return {{"entrypoint",
           {{"kind", env::entrypoint_kind_name(spec.entrypoint.kind)},
            {"target", spec.entrypoint.target},
            {"args", spec.entrypoint.args}}},
          {"resources", requested_resources(spec)}};
}

std::vector<std::string> work_differences(const json& recorded, const ordered_json& requested) {
  static const json kNone;
  auto at = [](const json& doc, const char* key) -> const json& {
    if (!doc.is_object()) return kNone;
    auto it = doc.find(key);
    return it == doc.end() ? kNone : *it;
  };
  std::vector<std::string> out;
  const json& entry = at(recorded, "entrypoint");
  json wanted_entry = requested.at("entrypoint");
  if (at(entry, "kind") != wanted_entry["kind"] || at(entry, "target") != wanted_entry["target"])
    out.push_back(difference("entrypoint", entrypoint_text(entry), entrypoint_text(wanted_entry)));
  const json& args = at(entry, "args");
  if ((args.is_null() ? json::array() : args) != wanted_entry["args"])
    out.push_back(difference("arguments", args_text(args), args_text(wanted_entry["args"])));
  const json& resources = at(recorded, "resources");
  for (const auto& [key, wanted] : requested.at("resources").items()) {
    const json& had = at(resources, key.c_str());
    if (had != json(wanted)) out.push_back(difference("resources." + key, value_text(had), value_text(json(wanted))));
  }
  return out;
}

std::optional<RunInfo> newest_run_named(const std::string& root, const std::string& name) {
  return newest_with(root, "name", name);
}

std::optional<RunInfo> newest_run_with_key(const std::string& root, const std::string& key) {
  return newest_with(root, "idempotency_key", key);
}

KeyLock::KeyLock(const std::string& root, const std::string& key, const std::function<void()>& before_waiting) {
  auto dir = fs::path(root) / kKeyLockDir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  auto path = (dir / fmt::format("{:016x}", fnv1a(key))).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0)
    throw Error(fmt::format("--idempotency-key: cannot create the key's lock {}: {}", path, std::strerror(errno)), 1);
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  if (errno == EWOULDBLOCK && before_waiting) before_waiting();
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    auto why = std::strerror(errno);
    ::close(fd_);
    throw Error(fmt::format("--idempotency-key: cannot lock {}: {}", path, why), 1);
  }
}

KeyLock::~KeyLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace sgpu::launcher
