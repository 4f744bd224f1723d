#include "startup.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/env/suggest.hpp"

namespace sgpu::app {

void open_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // The lowest free number is `fd` itself: the ones below it are open by now.
    int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (opened >= 0 && opened != fd) {
      ::dup2(opened, fd);
      ::close(opened);
    }
  }
}

void check_command_word(const CLI::App& app, int argc, char** argv) {
  if (argc < 2) return;
  std::string word = argv[1];
  if (word.empty() || word[0] == '-') return;
  std::vector<std::string> names;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == word) return;
    names.push_back(sub->get_name());
  }
  std::string valid;
  for (const auto& n : names) valid += (valid.empty() ? "" : ", ") + n;
  auto near = env::closest_match(word, names);
  throw Error(fmt::format("unknown command '{}'{}; valid: {}. Run 'sgpu --help' for what each does", word,
                          near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near), valid));
}

}  // namespace sgpu::app
