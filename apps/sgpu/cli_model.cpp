#include "cli_model.hpp"

#include <algorithm>
#include <iterator>

namespace sgpu::app {
namespace {

// "local|ssh|slurm" (the schema's value names) or CLI11's "TEXT:{text,json}".
std::vector<std::string> choices_of(const std::string& type) {
  std::string list;
  if (auto open = type.find('{'); open != std::string::npos && type.find('}', open) != std::string::npos)
    list = type.substr(open + 1, type.find('}', open) - open - 1);
  else if (type.find('|') != std::string::npos && type.find(' ') == std::string::npos)
    list = type;
  std::vector<std::string> out;
  std::size_t start = 0;
  while (!list.empty() && start <= list.size()) {
    auto end = list.find_first_of(",|", start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool is_path(const OptionModel& o, const std::string& type) {
  if (type.find("PATH") != std::string::npos || type.find("FILE") != std::string::npos) return true;
  for (const auto& n : o.names)
    if (n == "--config" || n == "--log-dir" || n == "--env-file" || n.find("-file") != std::string::npos ||
        n == "--python" || n == "--ssh-config" || n == "--sync")
      return true;
  return false;
}

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

}  // namespace

std::vector<const CLI::Option*> options_of(const CLI::App& command) {
  auto out = command.get_options();
  for (const auto* group : command.get_subcommands([](const CLI::App* s) { return s->get_name().empty(); })) {
    auto more = options_of(*group);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

std::string GroupedOptionsFormatter::make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const {
  // CLI::Formatter::make_help of a named command, with option_sections for make_groups.
  if (mode == CLI::AppFormatMode::Sub || app->get_name().empty()) return Formatter::make_help(app, name, mode);
  return make_description(app) + make_usage(app, name) + make_positionals(app) + option_sections(app) +
         make_subcommands(app, mode) + "\n" + make_footer(app);
}

std::string GroupedOptionsFormatter::option_sections(const CLI::App* app) const {
  // CLI::Formatter::make_groups, over options_of(*app) rather than the command's own list.
  std::vector<const CLI::Option*> shown;
  std::vector<std::string> groups;
  for (const auto* opt : options_of(*app)) {
    if (!opt->nonpositional() || opt->get_group().empty()) continue;
    shown.push_back(opt);
    if (std::find(groups.begin(), groups.end(), opt->get_group()) == groups.end()) groups.push_back(opt->get_group());
  }
  std::string out;
  for (const auto& group : groups) {
    std::vector<const CLI::Option*> in_group;
    std::copy_if(shown.begin(), shown.end(), std::back_inserter(in_group),
                 [&](const CLI::Option* o) { return o->get_group() == group; });
    out += make_group(group, false, in_group);
    if (group != groups.back()) out += "\n";
  }
  return out;
}

std::vector<CommandModel> model_of(const CLI::App& root) {
  std::vector<CommandModel> out;
  for (const auto* sub : root.get_subcommands([](const CLI::App*) { return true; })) {
    CommandModel c{sub->get_name(), one_line(sub->get_description()), {}, ValueKind::None, sub->get_footer()};
    for (const auto* opt : options_of(*sub)) {
      if (opt->get_positional()) {
        c.positional = opt->get_name() == "RUN" ? ValueKind::Run : ValueKind::Path;
        continue;
      }
      OptionModel o;
      for (const auto& l : opt->get_lnames()) o.names.push_back("--" + l);
      for (const auto& s : opt->get_snames()) o.names.push_back("-" + s);
      if (o.names.empty()) continue;
      o.help = one_line(opt->get_description());
      auto type = opt->get_type_name();
      o.value_name = type;
      if (opt->get_expected_min() == 0 || opt->get_type_size() == 0) {
        o.value = ValueKind::None;
      } else if (auto choices = choices_of(type); !choices.empty()) {
        o.value = ValueKind::Choice;
        o.choices = std::move(choices);
      } else {
        o.value = is_path(o, type) ? ValueKind::Path : ValueKind::Any;
      }
      c.options.push_back(std::move(o));
    }
    if (c.name == "launch") c.positional = ValueKind::Path;
    if (c.name == "completion") c.positional = ValueKind::Choice;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace sgpu::app
