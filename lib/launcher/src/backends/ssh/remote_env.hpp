#pragma once
// The environment a remote node's ranks get from this side: an allowlist of
// what matters to training (paths, CUDA, NCCL, MLflow, Hugging Face), the
// spec's [env], `--env-file F` and `-x NAME[=value]`. Pure.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher::ssh {

// PATH, LD_LIBRARY_PATH, PYTHONPATH, VIRTUAL_ENV and CUDA_*, NCCL_*, MLFLOW_*,
// HF_*. CUDA_VISIBLE_DEVICES is not: each node chooses its own GPUs.
bool forwarded_by_default(std::string_view name);

// "NAME=value", or "NAME" for this side's value. `where` names the source in
// messages ("-x", "--env-file f:3"). Throws sgpu::Error for a bad name or an
// unset NAME.
std::pair<std::string, std::string> parse_env_assignment(std::string_view text, const env::Environment& inherited,
                                                         std::string_view where);

// Lines "NAME=value", "export NAME=value", "NAME" (this side's value), with
// '#' comments; a value in matching single or double quotes loses them, and
// nothing else is interpreted. `path` names the file in messages.
env::Environment parse_env_file(std::string_view text, std::string_view path, const env::Environment& inherited);

struct RemoteEnvSources {
  env::Environment spec_env;                // [env]
  std::vector<env::Environment> env_files;  // --env-file, in order
  std::vector<std::string> x_flags;         // -x, in order
};

// Later sources win: allowlist < [env] < --env-file < -x.
env::Environment remote_environment(const env::Environment& inherited, const RemoteEnvSources& sources);

}  // namespace sgpu::launcher::ssh
