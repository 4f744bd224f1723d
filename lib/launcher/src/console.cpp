#include "sgpu/launcher/console.hpp"

#include <unistd.h>
#include <cerrno>

#include <fmt/format.h>

namespace sgpu::launcher {

void ConsolePrinter::emit_line(int rank, Stream, std::string_view line, std::string& out) const {
  if (options_.prefix) fmt::format_to(std::back_inserter(out), "[{}] ", rank);
  out.append(line);
}

void ConsolePrinter::on_rank_output(int rank, Stream stream, std::string_view bytes) {
  std::string out;
  splitters_[{rank, stream}].feed(bytes, [&](std::string_view line) { emit_line(rank, stream, line, out); });
  // One write per chunk of whole lines: another rank's line can never land inside.
  if (!out.empty()) write_all(stream, out);
}

void ConsolePrinter::on_rank_output_closed(int rank, Stream stream) {
  auto it = splitters_.find({rank, stream});
  if (it == splitters_.end() || !it->second.has_partial()) return;
  std::string out;
  emit_line(rank, stream, it->second.finish(), out);
  out.push_back('\n');
  write_all(stream, out);
}

void ConsolePrinter::write_all(Stream stream, std::string_view data) {
  auto idx = static_cast<std::size_t>(stream == Stream::Out ? 0 : 1);
  if (broken_[idx]) return;
  int fd = stream == Stream::Out ? options_.stdout_fd : options_.stderr_fd;
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      broken_[idx] = true;  // e.g. `sgpu launch ... | head`: keep running, stop printing
      return;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace sgpu::launcher
