#pragma once
// A JobSpec from its sources, lowest precedence first:
//   TOML file (--config) < SGPU_* variables < flags < --set path.to.key=value
// Each source becomes a Layer of Settings through the schema (spec_schema.hpp):
// unknown keys, wrong types and bad values are errors that say where
// (file:line:col, the variable, the flag) and what is valid. resolve_spec
// merges the layers, checks what only the whole shows (contradictions), and
// reports every error at once. Only read_spec_file touches the disk.
#include <string>
#include <string_view>
#include <vector>

#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/spec/spec.hpp"
#include "sgpu/launcher/spec/spec_schema.hpp"

namespace sgpu::launcher {

struct Layer {
  std::vector<Setting> settings;
  std::vector<std::string> errors;
};

// A TOML spec; `path` names it in messages.
Layer file_layer(std::string_view toml_text, const std::string& path);

// Reads and parses the file; a file that cannot be read, that is not a
// regular file or that is over 1 MiB is an error in the layer.
Layer read_spec_file(const std::string& path);

// The SGPU_* variables the schema names (SGPU_PYTHON, ...).
Layer environment_layer(const env::Environment& environment);

// One flag as given: its schema key, its name ("--gpus") and its text ("4";
// "true" for a flag without a value).
struct FlagValue {
  const KeyInfo* key = nullptr;
  std::string flag;
  std::string text;
  // A repeatable list flag (-x A -x B=1): one item per use, taken as given
  // (values may hold commas). Used instead of `text` when not empty.
  std::vector<std::string> items;
};

// Flags, and the entrypoint words: the first is job.entrypoint, the rest
// job.args (both replace what lower layers said).
Layer command_line_layer(const std::vector<FlagValue>& flags, const std::vector<std::string>& entrypoint_words);

// --set path.to.key=value, repeatable. The value is read as the key's type:
// resources.gpus=8, job.args=["--epochs", "3"] or job.args=--epochs,3,
// env.NCCL_DEBUG=INFO, job.python='/opt/py 3/bin/python'.
Layer set_layer(const std::vector<std::string>& assignments);

struct ResolvedSpec {
  JobSpec spec;
  std::vector<Setting> settings;   // the setting that won, per key, in schema order
  std::vector<std::string> notes;  // settings the chosen backend does not use, said once
};

// Merges `layers` (lowest precedence first). A key set in a higher layer
// replaces it; setting one side of an exclusive pair (resources.gpus vs
// resources.nproc, job.module vs job.no_python) drops the other side from
// lower layers, so `--nproc 2` overrides a file's `gpus = 8`. Throws
// sgpu::Error (exit code 2) listing every error of every layer.
ResolvedSpec resolve_spec(const std::vector<Layer>& layers);

}  // namespace sgpu::launcher
