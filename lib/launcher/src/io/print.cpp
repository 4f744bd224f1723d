#include "sgpu/launcher/io/print.hpp"

#include <poll.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace sgpu::launcher {
namespace {
// Written from the loop's thread and read by main once the command ended;
// atomics only so that a thread's diagnostic (the pruner's) is safe too.
std::atomic<std::size_t> dropped_diagnostics{0};
std::atomic<int> output_error{0};
std::atomic<int> output_error_fd{1};
std::atomic<bool> stdout_written{false};

void record_output(int fd, int error) noexcept {
  int none = 0;
  if (error != 0 && output_error.compare_exchange_strong(none, error)) output_error_fd = fd;
}
}  // namespace

int write_all(int fd, std::string_view bytes) noexcept {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return EIO;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    // A descriptor someone made non-blocking (a shared terminal, a pipe):
    // wait until it takes more, as a blocking write would.
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) return errno;
  }
  return 0;
}

void diagnostic(std::string_view text) noexcept {
  if (write_all(2, text) != 0) diagnostic_dropped();
}

void diagnostic_dropped() noexcept { ++dropped_diagnostics; }

void output(std::string_view text, int fd) noexcept {
  if (fd == 1) stdout_written = true;
  record_output(fd, write_all(fd, text));
}

StreamFailures stream_failures() noexcept {
  return {dropped_diagnostics.load(), output_error.load(), output_error_fd.load(), stdout_written.load()};
}

std::string output_failure_message(int fd, int error) {
  if (error == EPIPE) return {};
  return std::string("cannot write to ") + (fd == 2 ? "stderr" : "stdout") + ": " + std::strerror(error);
}

int exit_code_after_output(int code) noexcept {
  auto failed = stream_failures();
  if (failed.output_errno == 0 || code != 0) return code;
  try {
    auto message = output_failure_message(failed.output_fd, failed.output_errno);
    if (!message.empty()) diagnostic("sgpu: error: {}\n", message);
  } catch (...) {
    diagnostic_dropped();
  }
  return 1;
}

}  // namespace sgpu::launcher
