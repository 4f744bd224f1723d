#pragma once
// The run's shared secret and the HMAC-SHA256 challenge-response built on it.
// The launcher makes a secret per run from the OS's random source; agents get
// it out of band (the SGPU_RDZV_SECRET environment variable or a 0600 file),
// never on a command line where `ps` would show it. Each side proves it knows
// the secret by a MAC over both sides' fresh nonces, so a recorded exchange
// cannot be replayed. OpenSSL provides the primitives.
#include <string>
#include <string_view>

#include "sgpu/env/rank_env.hpp"
#include "sgpu/rendezvous/protocol.hpp"

namespace sgpu::rendezvous {

inline constexpr const char* kSecretEnvVar = "SGPU_RDZV_SECRET";
inline constexpr std::size_t kMinSecretChars = 32;

class Secret {
 public:
  // 32 random bytes from the OS, as 64 hex characters.
  static Secret generate();
  // A secret a user made (file contents, an environment variable):
  // surrounding whitespace is dropped; it must have at least 32 characters.
  // `source` names where it came from in errors.
  static Secret from_text(std::string_view text, std::string_view source);

  // The form agents are given (the environment variable's value, the file's contents).
  const std::string& text() const { return key_; }

 private:
  explicit Secret(std::string key) : key_(std::move(key)) {}
  std::string key_;
};

// Reads a secret file. Refuses one that others can read or that another
// user owns, saying how to fix it. `flag` names the option in errors.
Secret load_secret_file(const std::string& path, std::string_view flag);

// One line from `fd` (standard input for `--rdzv-secret-file -`: an ssh
// backend can hand the secret over the connection it already has).
Secret read_secret_line(int fd, std::string_view flag);

// Writes `secret` to a new file readable only by this user (mode 0600).
void write_secret_file(const std::string& path, const Secret& secret);

// The secret from the file ("-": one line of standard input), else from
// SGPU_RDZV_SECRET, else an error that says how to provide one.
Secret find_secret(const env::Environment& environment, const std::string& file, std::string_view flag);

// A key for something else the run's nodes share (the --ray cluster's token):
// HMAC-SHA256(secret, label) in hex, so the secret itself is never handed on.
std::string derive_hex(const Secret& secret, std::string_view label);

Nonce make_nonce();
Proof server_proof(const Secret& secret, const Nonce& client_nonce, const Nonce& server_nonce);
Proof client_proof(const Secret& secret, const Nonce& server_nonce, const Nonce& client_nonce);
// Constant-time comparison.
bool proof_matches(const Proof& expected, const Proof& received);

}  // namespace sgpu::rendezvous
