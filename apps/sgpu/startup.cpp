#include "startup.hpp"

#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
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

namespace {
int give_back_table(dl_phdr_info* info, size_t /*size*/, void* /*data*/) {
  // The first object is the program itself.
  const ElfW(Dyn)* dynamic = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i)
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
      dynamic = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
  if (dynamic == nullptr) return 1;
  ElfW(Addr) table = 0;
  std::size_t bytes = 0;
  for (const auto* d = dynamic; d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_RELA) table = d->d_un.d_ptr;
    if (d->d_tag == DT_RELASZ) bytes = d->d_un.d_val;
  }
  if (table == 0 || bytes == 0) return 1;
  // glibc's loader adds the load address to the entry in place; another may not.
  if (table < info->dlpi_addr) table += info->dlpi_addr;
  auto page = static_cast<ElfW(Addr)>(::sysconf(_SC_PAGESIZE));
  auto first = (table + page - 1) / page * page;
  auto end = (table + bytes) / page * page;
  if (end > first) ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
  return 1;
}
}  // namespace

void give_back_relocation_table() { ::dl_iterate_phdr(give_back_table, nullptr); }

CLI::Validator at_least(long long min) {
  auto check = [min](std::string& text) -> std::string {
    long long value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec == std::errc::result_out_of_range) return fmt::format("{} is too large", text);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty())
      return fmt::format("'{}' is not a whole number; give {} or more", text, min);
    if (value < min) return fmt::format("{} is below {}; give {} or more", text, min, min);
    return {};
  };
  return {check, fmt::format("N>={}", min), fmt::format("at least {}", min)};
}

CLI::Validator non_empty_path() {
  auto check = [](std::string& text) -> std::string {
    return text.empty() ? "an empty path; give a directory, or leave the option out for the default" : "";
  };
  return {check, "PATH", "non-empty path"};
}

CLI::Validator above_zero() {
  auto check = [](std::string& text) -> std::string {
    char* end = nullptr;
    double value = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value))
      return fmt::format("'{}' is not a number", text);
    if (value <= 0) return fmt::format("{} is not above 0; give a number above 0", text);
    return {};
  };
  return {check, "X>0", "above zero"};
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
