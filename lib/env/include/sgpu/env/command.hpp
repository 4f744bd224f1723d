#pragma once
// What a rank runs: the entrypoint as the user gave it, turned into argv.
#include <string>
#include <string_view>
#include <vector>

namespace sgpu::env {

struct Entrypoint {
  enum class Kind { Script, Module, Executable };
  Kind kind = Kind::Script;
  std::string target;             // script path, module name or executable
  std::vector<std::string> args;  // passed to the job untouched
};

// Script: python -u script args...; Module: python -u -m module args...;
// Executable: target args... (`python` is ignored).
std::vector<std::string> build_argv(const Entrypoint& entry, const std::string& python);

// "script", "module", "executable": the spelling in spec.json and the agent's job.
const char* entrypoint_kind_name(Entrypoint::Kind kind);

// For a torchrun option sgpu does not take: a sentence saying why and what to
// use instead. Empty when `flag` (e.g. "--rdzv-backend", "--tee=3") is not one.
std::string unsupported_torchrun_option(std::string_view flag);

// Shell-quoted, for showing a command line to a user ("a b" -> 'a b').
std::string shell_quote(std::string_view arg);
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace sgpu::env
