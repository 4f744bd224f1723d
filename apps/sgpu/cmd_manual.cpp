// sgpu manual: the sgpu(1) man page in roff, generated from the CLI itself
// (cli_model.hpp), so that a flag cannot exist without its entry.
//   sgpu manual | man -l -
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "cli_model.hpp"
#include "commands.hpp"
#include "readme_exit_codes.hpp"
#include "sgpu/launcher/io/print.hpp"

namespace sgpu::app {
namespace {

// Text as roff reads it: backslashes doubled, a leading '.' or '\'' kept
// from being read as a request, hyphens in option names as \-.
std::string roff(std::string_view text) {
  std::string out;
  for (char ch : text) {
    if (ch == '\\')
      out += "\\e";
    else if (ch == '-')
      out += "\\-";
    else
      out += ch;
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

// The footer's lines, each its own paragraph line (.br between them).
std::string footer_text(const std::string& footer) {
  std::string out;
  std::size_t start = 0;
  while (start < footer.size()) {
    auto end = footer.find('\n', start);
    if (end == std::string::npos) end = footer.size();
    auto line = footer.substr(start, end - start);
    if (!line.empty()) out += roff(line) + "\n.br\n";
    start = end + 1;
  }
  return out;
}

// Markdown `code` as bold.
std::string inline_code(std::string_view text) {
  std::string out;
  bool bold = false;
  for (char ch : text) {
    if (ch == '`') {
      out += (bold = !bold) ? "\\fB" : "\\fR";
      continue;
    }
    out += roff(std::string_view(&ch, 1));
  }
  return out;
}

// The README's "| code | when |" rows as a tagged list.
std::string exit_codes(std::string_view table) {
  std::string out;
  std::size_t start = 0;
  while (start < table.size()) {
    auto end = table.find('\n', start);
    if (end == std::string_view::npos) end = table.size();
    auto row = table.substr(start, end - start);
    start = end + 1;
    auto code_end = row.find(" | ", 2);
    if (row.size() < 4 || code_end == std::string_view::npos) continue;
    auto code = row.substr(2, code_end - 2);
    auto when = row.substr(code_end + 3);
    if (when.size() >= 2 && when.substr(when.size() - 2) == " |") when.remove_suffix(2);
    out += fmt::format(".TP\n.B {}\n{}\n", roff(code), inline_code(when));
  }
  return out;
}

std::string manual(const std::vector<CommandModel>& commands) {
  std::string out =
      ".TH SGPU 1 \"\" \"sgpu\" \"User Commands\"\n"
      ".SH NAME\n"
      "sgpu \\- launch distributed training on N GPUs of this node or of remote nodes\n"
      ".SH SYNOPSIS\n"
      ".B sgpu launch\n"
      "[\\fIOPTIONS\\fR] \\fIscript.py\\fR [\\fIARGS\\fR...]\n"
      ".br\n"
      ".B sgpu\n"
      "\\fICOMMAND\\fR [\\fIOPTIONS\\fR] [\\fIRUN\\fR]\n"
      ".SH DESCRIPTION\n"
      "sgpu starts every rank of a distributed job with the environment torchrun gives it (RANK, LOCAL_RANK, "
      "WORLD_SIZE, MASTER_ADDR, ...), on this node or on remote nodes (ssh, SLURM), supervises them, stops them "
      "all at the first failure, and keeps each run's logs, events and summary in its run directory. This page "
      "lists every command and option, generated from sgpu itself; the README explains them at length.\n"
      ".SH COMMANDS\n";
  for (const auto& c : commands) out += fmt::format(".TP\n.B {}\n{}\n", roff(c.name), roff(c.help));
  for (const auto& c : commands) {
    out += fmt::format(".SH \"SGPU {}\"\n{}\n", roff(c.name), roff(c.help));
    if (!c.footer.empty()) out += ".PP\n" + footer_text(c.footer);
    if (c.positional == ValueKind::Run)
      out += ".PP\nRUN is a run id, a unique prefix of one, a run's \\-\\-name, or \\fBlast\\fR.\n";
    for (const auto& o : c.options) {
      std::string names;
      for (const auto& n : o.names) names += (names.empty() ? "" : ", ") + fmt::format("\\fB{}\\fR", roff(n));
      auto value = o.value == ValueKind::None ? std::string() : " \\fI" + roff(o.value_name) + "\\fR";
      out += fmt::format(".TP\n{}{}\n{}\n", names, value, roff(o.help));
    }
  }
  out += ".SH \"EXIT STATUS\"\n" + exit_codes(kReadmeExitCodes) +
         ".SH FILES\n"
         ".TP\n"
         ".I $SGPU_HOME/runs/<run id>/\n"
         "A run's directory: spec.json, state.json, events.jsonl, summary.json, ranks/<rank>/stdout and stderr.\n"
         ".SH \"SEE ALSO\"\n"
         "torchrun(1), mpirun(1), srun(1); sgpu completion bash|zsh|fish for shell completion.\n";
  return out;
}

}  // namespace

Command add_manual_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("manual", "Print the sgpu(1) man page (roff): sgpu manual | man -l -");
  (void)cmd;
  return [&app](const DashTail&) {
    launcher::output(manual(model_of(app)));
    return 0;
  };
}

}  // namespace sgpu::app
