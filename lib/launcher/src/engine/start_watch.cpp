#include "engine/start_watch.hpp"

#include <chrono>
#include <csignal>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/env/exit_code.hpp"

namespace sgpu::launcher {

StartWatch::StartWatch(boost::asio::io_context& io, std::optional<env::Seconds> left,
                       std::optional<env::Seconds> timeout)
    : signals_(io, SIGINT, SIGTERM, SIGHUP), deadline_(io), timeout_(timeout) {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) signal_ = sig;
  });
  if (!left) return;
  deadline_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(*left));
  deadline_.async_wait([this](boost::system::error_code ec) {
    if (!ec) timed_out_ = true;
  });
}

void StartWatch::throw_if_fired(const char* waiting_for) const {
  if (signal_ != 0)
    throw Error(
        fmt::format("interrupted by {} while waiting for {}; no rank started", env::signal_name(signal_), waiting_for),
        128 + signal_);
  if (timed_out_)
    throw Error(fmt::format("timed out (--timeout {}) while waiting for {}; no rank started",
                            env::format_duration(*timeout_), waiting_for),
                kExitTimeout);
}

void StartWatch::stop() {
  signals_.cancel();
  deadline_.cancel();
}

}  // namespace sgpu::launcher
