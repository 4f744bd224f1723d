// sgpu manual: the sgpu(1) man page in roff, generated from the CLI itself
// (cli_model.hpp), so that a flag cannot exist without its entry.
//   sgpu manual | man -l -
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "cli_model.hpp"
#include "commands.hpp"
#include "readme_exit_codes.hpp"
#include "sgpu/launcher/io/print.hpp"

namespace sgpu::app {
namespace {

// Text as roff reads it: backslashes as \e, hyphens (option names) as \-,
// and a line starting with '.' or '\'' kept from being read as a request.
// Markdown `code`, where `code_as_bold`, in bold.
std::string roff(std::string_view text, bool code_as_bold = false) {
  std::string out;
  bool bold = false;
  for (char ch : text) {
    if (ch == '\\')
      out += "\\e";
    else if (ch == '-')
      out += "\\-";
    else if (ch == '`' && code_as_bold)
      out += (bold = !bold) ? "\\fB" : "\\fR";
    else
      out += ch;
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

// The lines of `text`, without their newlines.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// The footer's lines, each its own paragraph line (.br between them).
std::string footer_text(const std::string& footer) {
  std::string out;
  for (auto line : lines_of(footer))
    if (!line.empty()) out += roff(line) + "\n.br\n";
  return out;
}

// The README's "| code | when |" rows as a tagged list.
std::string exit_codes(std::string_view table) {
  std::string out;
  for (auto row : lines_of(table)) {
    auto code_end = row.find(" | ", 2);
    if (row.size() < 4 || code_end == std::string_view::npos) continue;
    auto code = row.substr(2, code_end - 2);
    auto when = row.substr(code_end + 3);
    if (when.size() >= 2 && when.substr(when.size() - 2) == " |") when.remove_suffix(2);
    out += fmt::format(".TP\n.B {}\n{}\n", roff(code), roff(when, true));
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
