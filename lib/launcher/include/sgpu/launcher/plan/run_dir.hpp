#pragma once
// The run directory: one per launch, the place that keeps everything a run
// leaves behind (per-rank error and result files, logs, summary).
//   <root>/<run-id>/ranks/<rank>/{error.json,result}
#include <string>

#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

// "20261202-115301-3fa2c1": sortable by start time, unique by 24 random bits.
std::string make_run_id();

// $SGPU_HOME/runs, $XDG_STATE_HOME/sgpu/runs or ~/.local/state/sgpu/runs.
std::string default_runs_root(const env::Environment& environment);

// Creates <root>/<run_id>/ranks/<r>/ for ranks first_rank .. first_rank+ranks-1
// (a node of a multi-node run holds only its own); returns the run directory.
// Throws sgpu::Error naming the path when it cannot.
std::string create_run_dir(const std::string& root, const std::string& run_id, int ranks, int first_rank = 0);

}  // namespace sgpu::launcher
