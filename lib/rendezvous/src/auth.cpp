#include "sgpu/rendezvous/auth.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "sgpu/env/error.hpp"

namespace sgpu::rendezvous {
namespace {

constexpr std::string_view kServerLabel = "sgpu-rdzv-v1 launcher";
constexpr std::string_view kClientLabel = "sgpu-rdzv-v1 agent";

void random_bytes(unsigned char* out, std::size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1)
    throw Error("cannot read the OS random source (OpenSSL RAND_bytes)", 1);
}

// HMAC-SHA256 under the run's secret. HMAC() looked the algorithm up among
// OpenSSL's providers and keyed a new context on every call: a twentieth of
// the launcher's CPU when 16384 agents authenticate at once. The algorithm
// is fetched once and the keyed context kept for the last secret used (one a
// run), re-armed for each message with the same key.
Proof mac(const Secret& secret, std::string_view label, const Nonce& first, const Nonce& second) {
  struct Keyed {
    EVP_MAC* hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    EVP_MAC_CTX* ctx = nullptr;
    std::string key;
    Keyed() = default;
    Keyed(const Keyed&) = delete;
    Keyed& operator=(const Keyed&) = delete;
    ~Keyed() {
      EVP_MAC_CTX_free(ctx);
      EVP_MAC_free(hmac);
    }
  };
  thread_local Keyed keyed;
  const auto& key = secret.text();
  bool ok = keyed.hmac != nullptr;
  if (ok && (keyed.ctx == nullptr || keyed.key != key)) {
    EVP_MAC_CTX_free(keyed.ctx);
    keyed.ctx = EVP_MAC_CTX_new(keyed.hmac);
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0), OSSL_PARAM_construct_end()};
    ok = keyed.ctx != nullptr &&
         EVP_MAC_init(keyed.ctx, reinterpret_cast<const unsigned char*>(key.data()), key.size(), params) == 1;
    keyed.key = ok ? key : std::string();
  } else if (ok) {
    ok = EVP_MAC_init(keyed.ctx, nullptr, 0, nullptr) == 1;  // the same key, a new message
  }
  Proof out{};
  std::size_t len = 0;
  ok = ok && EVP_MAC_update(keyed.ctx, reinterpret_cast<const unsigned char*>(label.data()), label.size()) == 1 &&
       EVP_MAC_update(keyed.ctx, first.data(), first.size()) == 1 &&
       EVP_MAC_update(keyed.ctx, second.data(), second.size()) == 1 &&
       EVP_MAC_final(keyed.ctx, out.data(), &len, out.size()) == 1 && len == out.size();
  if (!ok) {
    EVP_MAC_CTX_free(std::exchange(keyed.ctx, nullptr));
    keyed.key.clear();
    throw Error("HMAC-SHA256 failed (OpenSSL)", 1);
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

constexpr std::string_view kMakeOne = "make one with: (umask 077; openssl rand -hex 32 > FILE)";

template <typename Bytes>
std::string to_hex(const Bytes& bytes) {
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

}  // namespace

Secret Secret::generate() {
  unsigned char bytes[32];
  random_bytes(bytes, sizeof bytes);
  return Secret(to_hex(bytes));
}

Secret Secret::from_text(std::string_view text, std::string_view source) {
  auto key = trim(text);
  if (key.size() < kMinSecretChars)
    throw Error(fmt::format("{}: the rendezvous secret has {} characters, fewer than {}; {}", source, key.size(),
                            kMinSecretChars, kMakeOne));
  return Secret(std::string(key));
}

Secret load_secret_file(const std::string& path, std::string_view flag) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) throw Error(fmt::format("{} {}: cannot open: {}", flag, path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("{} {}: not a regular file", flag, path));
  }
  if (st.st_uid != ::geteuid()) {
    ::close(fd);
    throw Error(fmt::format("{} {}: owned by uid {}, not by this user (uid {}); the secret must be yours alone", flag,
                            path, st.st_uid, ::geteuid()));
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    throw Error(fmt::format("{} {}: others can read it (mode {:04o}); run: chmod 600 {}", flag, path,
                            st.st_mode & 07777, path));
  }
  std::string text(4096, '\0');
  ssize_t n = ::read(fd, text.data(), text.size());
  int err = errno;
  ::close(fd);
  if (n < 0) throw Error(fmt::format("{} {}: cannot read: {}", flag, path, std::strerror(err)));
  text.resize(static_cast<std::size_t>(n));
  return Secret::from_text(text, fmt::format("{} {}", flag, path));
}

Secret read_secret_line(int fd, std::string_view flag) {
  std::string text;
  char c = 0;
  while (text.size() < 4096) {
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == '\n') break;
    text.push_back(c);
  }
  return Secret::from_text(text, fmt::format("{} - (standard input)", flag));
}

void write_secret_file(const std::string& path, const Secret& secret) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) throw Error(fmt::format("cannot create the secret file {}: {}", path, std::strerror(errno)), 1);
  std::string text = secret.text() + "\n";
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    throw Error(fmt::format("cannot write the secret file {}: {}", path, std::strerror(err)), 1);
}

Secret find_secret(const env::Environment& environment, const std::string& file, std::string_view flag) {
  if (file == "-") return read_secret_line(0, flag);
  if (!file.empty()) return load_secret_file(file, flag);
  if (auto it = environment.find(kSecretEnvVar); it != environment.end())
    return Secret::from_text(it->second, kSecretEnvVar);
  throw Error(
      fmt::format("a multi-node run needs the rendezvous secret shared by every node: give {} FILE (mode 0600) "
                  "or set {}; {}",
                  flag, kSecretEnvVar, kMakeOne));
}

Nonce make_nonce() {
  Nonce n{};
  random_bytes(n.data(), n.size());
  return n;
}

Proof server_proof(const Secret& secret, const Nonce& client_nonce, const Nonce& server_nonce) {
  return mac(secret, kServerLabel, client_nonce, server_nonce);
}

Proof client_proof(const Secret& secret, const Nonce& server_nonce, const Nonce& client_nonce) {
  return mac(secret, kClientLabel, server_nonce, client_nonce);
}

bool proof_matches(const Proof& expected, const Proof& received) {
  return CRYPTO_memcmp(expected.data(), received.data(), expected.size()) == 0;
}

std::string derive_hex(const Secret& secret, std::string_view label) {
  return to_hex(mac(secret, label, Nonce{}, Nonce{}));
}

}  // namespace sgpu::rendezvous
