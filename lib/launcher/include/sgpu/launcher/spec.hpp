#pragma once
// A job as the user asked for it (flags today, a TOML file later), before
// anything is resolved against this node.
#include <optional>
#include <string>
#include <vector>

#include "sgpu/env/command.hpp"
#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

enum class GpuBind { Node, PerRank };

struct JobSpec {
  env::Entrypoint entrypoint;
  std::string python;        // "" means $SGPU_PYTHON, else python3 on PATH
  std::optional<int> gpus;   // one rank per GPU
  std::optional<int> nproc;  // CPU ranks per node
  std::string gpu_type;      // "" means detect
  GpuBind gpu_bind = GpuBind::Node;
  std::optional<int> master_port;  // nullopt: a reserved free port
  std::string timeout = "3h";
  std::string grace = "30s";
  std::string log_dir;   // "" means $SGPU_HOME/runs
  env::Environment env;  // variables for every rank
  // What the run shows (README "Output"); every rank is logged whatever these say.
  std::vector<int> console_ranks;      // ranks shown on the console; empty: all
  bool raw_output = false;             // one rank's bytes untouched, no prefix
  bool timestamps = false;             // time of arrival on each console line
  std::string output_format = "text";  // "json": one summary document on stdout
};

}  // namespace sgpu::launcher
