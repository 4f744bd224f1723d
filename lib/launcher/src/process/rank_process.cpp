#include "sgpu/launcher/process/rank_process.hpp"

#include "process/child_exec.hpp"

#include <sys/prctl.h>
#include <unistd.h>
#include <csignal>

#include <boost/process/v2/environment.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/start_dir.hpp>
#include <boost/process/v2/stdio.hpp>

namespace sgpu::launcher {
namespace bp = boost::process::v2;

struct RankProcess::Impl {
  bp::process proc;
};

RankProcess::RankProcess(boost::asio::io_context& io, const RankLaunch& launch) : out_(io), err_(io) {
  auto env_strings = environment_strings(launch.env);
  std::vector<std::string> args(launch.argv.begin() + (launch.argv.empty() ? 0 : 1), launch.argv.end());

  bp::error_code ec;
  bp::default_process_launcher launcher;
  auto proc = launcher(io.get_executor(), ec, bp::filesystem::path(launch.executable), args,
                       bp::process_stdio{nullptr, out_, err_}, bp::process_environment(env_strings),
                       bp::process_start_dir(launch.cwd), ChildExecSetup{.parent = ::getpid(), .new_session = true});
  if (ec) throw std::system_error(ec.value(), std::generic_category(), launch.executable);
  pid_ = proc.id();
  impl_ = std::make_unique<Impl>(Impl{std::move(proc)});
}

RankProcess::~RankProcess() {
  // A rank is never left behind: the destructor of bp::process kills and reaps
  // a child that is still running.
}

void RankProcess::signal_group(int sig) const {
  if (pid_ > 0) ::kill(-pid_, sig);
}

void RankProcess::async_wait(std::function<void(int)> on_exit) {
  impl_->proc.handle().async_wait(
      [cb = std::move(on_exit)](bp::error_code ec, int status) { cb(ec ? (255 << 8) : status); });
}

}  // namespace sgpu::launcher
