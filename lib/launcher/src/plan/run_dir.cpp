#include "sgpu/launcher/plan/run_dir.hpp"

#include <sys/random.h>
#include <ctime>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;

std::string make_run_id() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  unsigned char bytes[3] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != sizeof bytes) bytes[0] = static_cast<unsigned char>(::clock());
  return fmt::format("{:04d}{:02d}{:02d}-{:02d}{:02d}{:02d}-{:02x}{:02x}{:02x}", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, bytes[0], bytes[1], bytes[2]);
}

std::string default_runs_root(const env::Environment& environment) {
  auto get = [&](const char* name) -> std::string {
    auto it = environment.find(name);
    return it == environment.end() ? std::string() : it->second;
  };
  if (auto home = get("SGPU_HOME"); !home.empty()) return (fs::path(home) / "runs").string();
  if (auto state = get("XDG_STATE_HOME"); !state.empty()) return (fs::path(state) / "sgpu" / "runs").string();
  if (auto home = get("HOME"); !home.empty()) return (fs::path(home) / ".local/state/sgpu/runs").string();
  return (fs::temp_directory_path() / "sgpu" / "runs").string();
}

std::string create_run_dir(const std::string& root, const std::string& run_id, int ranks, int first_rank) {
  auto dir = fs::absolute(fs::path(root) / run_id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (int r = first_rank; r < first_rank + ranks && !ec; ++r)
    fs::create_directories(dir / "ranks" / std::to_string(r), ec);
  if (ec) throw Error(fmt::format("cannot create the run directory {}: {}", dir.string(), ec.message()), 1);
  return dir.string();
}

}  // namespace sgpu::launcher
