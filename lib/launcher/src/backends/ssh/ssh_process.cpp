#include "backends/ssh/ssh_process.hpp"

#include "process/child_exec.hpp"

#include <sys/prctl.h>
#include <unistd.h>
#include <csignal>
#include <sstream>

#include <boost/process/v2/process.hpp>
#include <boost/process/v2/stdio.hpp>

namespace sgpu::launcher {
namespace bp = boost::process::v2;

struct SshProcess::Impl {
  bp::process proc;
};

std::string find_on_path(const std::string& program, const std::string& path) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0 ? program : "";
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    auto candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

SshProcess::SshProcess(boost::asio::io_context& io, const std::vector<std::string>& argv, const std::string& stdin_file)
    : in_(io), out_(io), err_(io) {
  const char* path = std::getenv("PATH");  // NOLINT(concurrency-mt-unsafe): read before any thread
  auto exe = find_on_path(argv.at(0), path ? path : "/usr/bin:/bin");
  if (exe.empty()) throw std::system_error(ENOENT, std::generic_category(), argv.at(0));
  std::vector<std::string> args(argv.begin() + 1, argv.end());
  bp::error_code ec;
  bp::default_process_launcher launcher;
  auto start = [&](auto&& input) {
    return launcher(io.get_executor(), ec, bp::filesystem::path(exe), args, bp::process_stdio{input, out_, err_},
                    ChildExecSetup{::getpid()});
  };
  auto proc = stdin_file.empty() ? start(in_) : start(bp::filesystem::path(stdin_file));
  if (ec) throw std::system_error(ec.value(), std::generic_category(), exe);
  pid_ = proc.id();
  impl_ = std::make_unique<Impl>(Impl{std::move(proc)});
}

// The destructor of bp::process kills and reaps an ssh still running; its
// group goes first, with whatever ssh started (a ProxyCommand).
SshProcess::~SshProcess() {
  bp::error_code ec;
  if (impl_ && impl_->proc.running(ec)) signal_group(SIGKILL);
}

void SshProcess::signal_group(int sig) const {
  if (pid_ > 0) ::kill(-pid_, sig);
}

void SshProcess::async_wait(std::function<void(int)> on_exit) {
  impl_->proc.handle().async_wait(
      [cb = std::move(on_exit)](bp::error_code ec, int status) { cb(ec ? (255 << 8) : status); });
}

}  // namespace sgpu::launcher
