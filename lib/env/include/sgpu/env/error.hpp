#pragma once
// The one exception type that carries a message a user can act on, and the
// exit code sgpu ends with. Thrown by library code, caught once in main.
#include <stdexcept>
#include <string>

namespace sgpu {

// Exit codes sgpu itself uses (see README "Exit codes").
inline constexpr int kExitUsage = 2;
inline constexpr int kExitTimeout = 124;
inline constexpr int kExitNotExecutable = 126;
inline constexpr int kExitNotFound = 127;

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, int exit_code = kExitUsage)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

}  // namespace sgpu
