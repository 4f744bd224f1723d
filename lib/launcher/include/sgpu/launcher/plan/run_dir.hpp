#pragma once
// The run directory: one per launch, the place that keeps everything a run
// leaves behind (per-rank error and result files, logs, summary).
//   <root>/<run-id>/ranks/<rank>/{error.json,result}
#include <ctime>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

// "20261202-115301-3fa2c1": sortable by start time, unique by 24 random bits.
std::string make_run_id();

// A run id's first part, the UTC second it names: "20261202-115301".
std::string run_id_second(std::time_t unix_seconds);

// $SGPU_HOME/runs (a "~" in it expanded), $XDG_STATE_HOME/sgpu/runs or
// ~/.local/state/sgpu/runs; with none of them set, private_temp_dir()/runs.
std::string default_runs_root(const env::Environment& environment);

// ${TMPDIR:-/tmp}/sgpu-<uid>, created 0700 if missing. Throws sgpu::Error when
// it is not a directory of this user that only this user can enter.
std::filesystem::path private_temp_dir(const env::Environment& environment);

// The home directory of `user` from the user database (getpwnam_r); nullopt
// when there is no such user.
std::optional<std::string> passwd_home(const std::string& user);
using HomeOf = std::optional<std::string> (*)(const std::string& user);

// "~" and "~/x" with $HOME put in, "~user" and "~user/x" with that user's
// home (`home_of`), as a shell would; other paths unchanged. Throws
// sgpu::Error naming `what` when HOME is not set or there is no such user.
std::string expand_home(const std::string& path, const env::Environment& environment, std::string_view what,
                        HomeOf home_of = passwd_home);

// Where runs go: the --log-dir / output.log_dir given (with "~" expanded),
// else default_runs_root().
std::string runs_root(const std::string& log_dir, const env::Environment& environment);

// Creates <root>/<run_id>/ranks/<r>/ for ranks first_rank .. first_rank+ranks-1
// (a node of a multi-node run holds only its own), the run directory mode
// 0700; returns the run directory.
// Throws sgpu::Error naming the path when it cannot.
std::string create_run_dir(const std::string& root, const std::string& run_id, int ranks, int first_rank = 0);

}  // namespace sgpu::launcher
