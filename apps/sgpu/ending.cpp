#include "ending.hpp"

#include <algorithm>

#include "sgpu/env/exit_code.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/outputs/summary.hpp"

namespace sgpu::app {

Ending& ending() {
  static Ending the_ending;
  return the_ending;
}

bool json_output_asked(const CLI::App& app, bool& launch) {
  bool json = false;
  for (const auto* sub : app.get_subcommands([](const CLI::App* s) { return s->parsed(); })) {
    launch = launch || sub->get_name() == "launch";
    if (const auto* o = sub->get_option_no_throw("--output")) {
      const auto& given = o->results();
      if (!given.empty()) json = given.back() == "json";
    }
    if (const auto* set = sub->get_option_no_throw("--set")) {
      for (const auto& s : set->results())
        if (s.rfind("output.format=", 0) == 0) json = s == "output.format=json";  // --set overrides the flag
    }
  }
  return json;
}

nlohmann::ordered_json ending_document(const Ending& ending, int code) {
  if (ending.launch) {
    env::JobEnd end;
    end.kind = env::JobEnd::Kind::NotStarted;
    end.reason = ending.error;
    end.cause_code = code;
    return launcher::not_started_json("", "", end);
  }
  return {{"exit_code", code},
          {"error", ending.error.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(ending.error)}};
}

void print_json_ending(const Ending& ending, int code) {
  if (!ending.json || launcher::stream_failures().stdout_written) return;
  // Other commands answer for themselves when they succeed (`logs -o json`
  // with no line prints none); their errors get this document.
  if (!ending.launch && ending.error.empty()) return;
  try {
    // A launch's is a summary, indented as every summary; the others' is one
    // line, which a reader of `logs -o json` (a document a line) can take too.
    launcher::output(launcher::dump_json(ending_document(ending, code), ending.launch ? 2 : -1));
  } catch (const std::exception&) {  // out of memory: nothing more can be said
  }
}

}  // namespace sgpu::app
