#pragma once
// sgpu's own words on its standard streams, written without exceptions:
// diagnostics (notes, warnings, errors, the end-of-run report) on stderr, and
// a command's output (a table, a JSON document, a run id) on stdout. A full
// disk or a closed pipe must never abort sgpu nor change its exit code: a
// failed diagnostic is counted and dropped; a failed output is remembered,
// and `exit_code_after_output` turns it into exit 1 (README "Exit codes").
// sgpu ignores SIGPIPE (main), so a closed pipe is EPIPE here, not a death.
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace sgpu::launcher {

// Writes every byte to `fd`: retries EINTR and short writes, and waits for a
// non-blocking descriptor to take more. Returns 0, or the errno that stopped it.
int write_all(int fd, std::string_view bytes) noexcept;

// A diagnostic on stderr, as given (the caller ends it with "\n").
void diagnostic(std::string_view text) noexcept;
void diagnostic_dropped() noexcept;

template <typename... T>
void diagnostic(fmt::format_string<T...> format, T&&... args) noexcept {
  try {
    diagnostic(std::string_view(fmt::format(format, std::forward<T>(args)...)));
  } catch (...) {  // out of memory for a message: dropped like a failed write
    diagnostic_dropped();
  }
}

// The command's output: on stdout, or on stderr for what is output there
// (`sgpu logs` shows the ranks' stderr on stderr). With -o json, main prints
// a document for an ending that wrote nothing on stdout (`stdout_written`).
void output(std::string_view text, int fd = 1) noexcept;

struct StreamFailures {
  std::size_t diagnostics = 0;  // diagnostics that were not written
  int output_errno = 0;         // why the first failed output failed, 0 when none did
  int output_fd = 1;            // and on which stream
  bool stdout_written = false;  // some output was written (or tried) on stdout
};
StreamFailures stream_failures() noexcept;

// What `output_fd` failing with `error` says: "cannot write to stdout: No
// space left on device". Empty for EPIPE: the reader chose to stop reading.
std::string output_failure_message(int fd, int error);

// sgpu's exit code once its output is written: `code`, or 1 when it is 0 and
// an output failed (with a diagnostic that says so, where one can be written).
int exit_code_after_output(int code) noexcept;

}  // namespace sgpu::launcher
