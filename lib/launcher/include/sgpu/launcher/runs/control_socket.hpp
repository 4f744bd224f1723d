#pragma once
// A running run answers questions from other sgpu commands (`sgpu stacks`)
// on a Unix socket in its run directory, <run_dir>/control.sock: one JSON
// request line in, one JSON document back, then the connection closes.
// The run directory is 0700, so only its user reaches the socket; the peer's
// uid is checked too. It is bound and reached through /proc/self/fd/N, an
// O_PATH descriptor of the directory, since a socket path may hold only 107
// bytes and run directories are often longer.
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

namespace sgpu::launcher {

inline constexpr const char* kControlSocketName = "control.sock";

class ControlSocket {
 public:
  // `answer(request, reply)`: reply once, on the loop, with the document to send.
  using Handler = std::function<void(const nlohmann::json& request, std::function<void(nlohmann::json)> reply)>;
  // Listens at once; a socket that cannot be made is warned about and the
  // run goes on without it.
  ControlSocket(boost::asio::io_context& io, const std::string& run_dir, Handler handler);
  ~ControlSocket();
  ControlSocket(const ControlSocket&) = delete;
  ControlSocket& operator=(const ControlSocket&) = delete;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Sends `request` to the run in `run_dir` and returns its answer, waiting at
// most `timeout_s`. Throws sgpu::Error when the run does not answer (it is
// not running, or is older than the control socket).
nlohmann::json ask_run(const std::string& run_dir, const nlohmann::json& request, int timeout_s);

}  // namespace sgpu::launcher
