// sgpu completion bash|zsh|fish: shell completion generated from the CLI
// itself (every subcommand and option as CLI11 knows them, which for
// `launch` is the spec schema's flags), so it cannot drift from --help.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli_model.hpp"
#include "commands.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"

namespace sgpu::app {
namespace {

// A description for fish's menu: one line, at most 100 characters.
std::string short_help(std::string text) {
  if (text.size() > 100) text = text.substr(0, 97) + "...";
  return text;
}

std::string joined(const std::vector<std::string>& words) { return fmt::format("{}", fmt::join(words, " ")); }

// What `sgpu completion` takes, and so what its word completes to.
const std::vector<std::string> kShells = {"bash", "zsh", "fish"};

// Single quotes for the shell: 'it'\''s'.
std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

std::string bash_script(const std::vector<CommandModel>& commands) {
  std::vector<std::string> names;
  for (const auto& c : commands) names.push_back(c.name);
  std::string cases;
  for (const auto& c : commands) {
    std::vector<std::string> all;
    std::vector<std::string> valued;
    std::string value_cases;
    for (const auto& o : c.options) {
      all.insert(all.end(), o.names.begin(), o.names.end());
      if (o.value == ValueKind::None) continue;
      valued.insert(valued.end(), o.names.begin(), o.names.end());
      auto pattern = fmt::format("{}", fmt::join(o.names, "|"));
      if (o.value == ValueKind::Choice)
        value_cases += fmt::format("        {}) COMPREPLY=($(compgen -W {} -- \"$cur\")); return ;;\n", pattern,
                                   quoted(joined(o.choices)));
      else if (o.value == ValueKind::Path)
        value_cases += fmt::format(
            "        {}) COMPREPLY=($(compgen -f -- \"$cur\")); compopt -o filenames 2>/dev/null; return ;;\n",
            pattern);
      else
        value_cases += fmt::format("        {}) return ;;\n", pattern);
    }
    std::string positional;
    switch (c.positional) {
      case ValueKind::Run:
        positional = "COMPREPLY=($(compgen -W \"last $(command sgpu runs --ids 2>/dev/null)\" -- \"$cur\"))";
        break;
      case ValueKind::Path:
        positional = "COMPREPLY=($(compgen -f -- \"$cur\")); compopt -o filenames 2>/dev/null";
        break;
      case ValueKind::Choice:
        positional = fmt::format("COMPREPLY=($(compgen -W {} -- \"$cur\"))", quoted(joined(kShells)));
        break;
      default:
        positional = "return";
    }
    cases += fmt::format(
        "    {name})\n"
        "      _sgpu_after {valued}\n"
        "      if [[ -n $_sgpu_rest ]]; then COMPREPLY=($(compgen -f -- \"$cur\")); compopt -o filenames 2>/dev/null; "
        "return; fi\n"
        "      case \"$prev\" in\n{value_cases}      esac\n"
        "      if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W {all} -- \"$cur\")); else {positional}; fi\n"
        "      ;;\n",
        fmt::arg("name", c.name), fmt::arg("valued", quoted(joined(valued))), fmt::arg("value_cases", value_cases),
        fmt::arg("all", quoted(joined(all))), fmt::arg("positional", positional));
  }
  return fmt::format(
      "# sgpu's bash completion (sgpu completion bash), generated from its options.\n"
      "# Load it with: source <(sgpu completion bash)\n"
      "\n"
      "# After the subcommand: is `cur` past launch's entrypoint (the job's own words)?\n"
      "_sgpu_after() {{\n"
      "  local valued=\" $1 \" i=$((_sgpu_at + 1)) w\n"
      "  _sgpu_rest=\n"
      "  [[ $_sgpu_cmd == launch ]] || return 0\n"
      "  while ((i < COMP_CWORD)); do\n"
      "    w=${{COMP_WORDS[i]}}\n"
      "    if [[ $w == -- ]]; then _sgpu_rest=1; return 0; fi\n"
      "    if [[ $w == -* ]]; then [[ $w != *=* && $valued == *\" $w \"* ]] && ((i++)); else _sgpu_rest=1; return 0; "
      "fi\n"
      "    ((i++))\n"
      "  done\n"
      "}}\n"
      "\n"
      "_sgpu() {{\n"
      "  local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}} i\n"
      "  _sgpu_cmd= _sgpu_at=0\n"
      "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
      "    if [[ ${{COMP_WORDS[i]}} != -* ]]; then _sgpu_cmd=${{COMP_WORDS[i]}} _sgpu_at=$i; break; fi\n"
      "  done\n"
      "  case \"$_sgpu_cmd\" in\n"
      "    '')\n"
      "      COMPREPLY=($(compgen -W {commands} -- \"$cur\"))\n"
      "      ;;\n"
      "{cases}"
      "  esac\n"
      "}}\n"
      "complete -F _sgpu sgpu\n",
      fmt::arg("commands", quoted(joined(names) + " --help --version")), fmt::arg("cases", cases));
}

std::string zsh_script(const std::vector<CommandModel>& commands) {
  return "# sgpu's zsh completion (sgpu completion zsh): the bash one, through zsh's bashcompinit.\n"
         "# Load it with: source <(sgpu completion zsh)\n"
         "(( $+functions[compdef] )) || { autoload -U +X compinit && compinit -u; }\n"
         "autoload -U +X bashcompinit && bashcompinit\n" +
         bash_script(commands);
}

std::string fish_script(const std::vector<CommandModel>& commands) {
  std::string out =
      "# sgpu's fish completion (sgpu completion fish), generated from its options.\n"
      "# Load it with: sgpu completion fish | source\n"
      "complete -c sgpu -f\n";
  for (const auto& c : commands)
    out += fmt::format("complete -c sgpu -n '__fish_use_subcommand' -a {} -d {}\n", c.name, quoted(short_help(c.help)));
  for (const auto& c : commands) {
    auto when = fmt::format("'__fish_seen_subcommand_from {}'", c.name);
    for (const auto& o : c.options) {
      std::string names_part;
      for (const auto& n : o.names)
        names_part += n.rfind("--", 0) == 0 ? fmt::format(" -l {}", n.substr(2)) : fmt::format(" -s {}", n.substr(1));
      std::string value;
      if (o.value == ValueKind::Choice)
        value = fmt::format(" -x -a {}", quoted(joined(o.choices)));
      else if (o.value == ValueKind::Path)
        value = " -r -F";
      else if (o.value == ValueKind::Any)
        value = " -x";
      out += fmt::format("complete -c sgpu -n {}{}{} -d {}\n", when, names_part, value, quoted(short_help(o.help)));
    }
    if (c.positional == ValueKind::Run)
      out += fmt::format("complete -c sgpu -n {} -a '(sgpu runs --ids 2>/dev/null) last'\n", when);
    else if (c.positional == ValueKind::Path)
      out += fmt::format("complete -c sgpu -n {} -F\n", when);
    else if (c.positional == ValueKind::Choice)
      out += fmt::format("complete -c sgpu -n {} -a {}\n", when, quoted(joined(kShells)));
  }
  return out;
}

}  // namespace

Command add_completion_command(CLI::App& app) {
  auto shell = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("completion",
                                 "Print shell completion for bash, zsh or fish: source <(sgpu completion bash), "
                                 "sgpu completion fish | source");
  cmd->add_option("SHELL", *shell, "bash, zsh or fish")->required()->check(CLI::IsMember(kShells));
  return [&app, shell](const DashTail&) {
    auto commands = model_of(app);
    if (*shell == "bash")
      launcher::output(bash_script(commands));
    else if (*shell == "zsh")
      launcher::output(zsh_script(commands));
    else
      launcher::output(fish_script(commands));
    return 0;
  };
}

}  // namespace sgpu::app
