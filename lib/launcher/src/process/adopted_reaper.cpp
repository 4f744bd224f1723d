#include "sgpu/launcher/process/adopted_reaper.hpp"

#include <csignal>

#include "sgpu/launcher/process/orphan_reaper.hpp"

namespace sgpu::launcher {

AdoptedReaper::AdoptedReaper(boost::asio::io_context& io) : sigchld_(io) {
  boost::system::error_code ec;
  sigchld_.add(SIGCHLD, ec);
  if (ec) return;  // no handler: the orphans wait for the sweep at the end, as before
  // Asio installs its handler without SA_RESTART: a SIGCHLD landing on a
  // writer thread would then fail its blocking calls with EINTR. Keep the
  // handler, restart the calls, and skip children that only stop or continue.
  struct sigaction action {};
  if (::sigaction(SIGCHLD, nullptr, &action) == 0) {
    action.sa_flags |= SA_RESTART | SA_NOCLDSTOP;
    ::sigaction(SIGCHLD, &action, nullptr);
  }
  wait();
  reaped_ += reap_exited_orphans();  // those that exited before the handler was in place
}

AdoptedReaper::~AdoptedReaper() { stop(); }

void AdoptedReaper::stop() {
  token_.reset();
  boost::system::error_code ignored;
  sigchld_.cancel(ignored);
  sigchld_.clear(ignored);
}

void AdoptedReaper::wait() {
  sigchld_.async_wait([this, alive = std::weak_ptr<int>(token_)](boost::system::error_code ec, int) {
    if (ec || alive.expired()) return;
    reaped_ += reap_exited_orphans();
    wait();
  });
}

}  // namespace sgpu::launcher
