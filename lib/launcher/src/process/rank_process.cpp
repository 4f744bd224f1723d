#include "sgpu/launcher/process/rank_process.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <system_error>

#include "process/child_exec.hpp"
#include "process/spawn.hpp"
#include "sgpu/launcher/process/child_process.hpp"

namespace sgpu::launcher {
namespace {
// Closes what it holds unless released: the fds of a half-made rank.
struct Fds {
  int fd[4] = {-1, -1, -1, -1};  // stdout read, write; stderr read, write
  ~Fds() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
};

// A rank's binding in the form the system calls take, made before the clone.
struct BindingMasks {
  std::vector<unsigned long> cpus;
  std::vector<unsigned long> nodes;

  static std::vector<unsigned long> mask_of(const std::vector<int>& bits) {
    constexpr int kWord = 8 * sizeof(unsigned long);
    std::vector<unsigned long> mask;
    for (int b : bits) {
      if (b < 0) continue;
      auto word = static_cast<std::size_t>(b / kWord);
      if (mask.size() <= word) mask.resize(word + 1, 0);
      mask[word] |= 1UL << (b % kWord);
    }
    return mask;
  }

  explicit BindingMasks(const RankLaunch& launch)
      : cpus(mask_of(launch.cpus)),
        nodes(launch.numa_node >= 0 ? mask_of({launch.numa_node}) : std::vector<unsigned long>{}) {}

  void apply(SpawnRequest& req) const {
    if (!cpus.empty()) {
      req.cpus = cpus.data();
      req.cpus_size = cpus.size() * sizeof(unsigned long);
    }
    if (!nodes.empty()) {
      req.numa_nodes = nodes.data();
      req.numa_bits = nodes.size() * 8 * sizeof(unsigned long);
    }
  }
};
}  // namespace

std::vector<RankLaunch> rank_launches(const LaunchPlan& plan) {
  std::vector<RankLaunch> launches;
  launches.reserve(plan.ranks.size());
  for (const auto& r : plan.ranks) {
    launches.push_back({r.place.rank, plan.executable, plan.argv, r.env, {}, plan.cwd, {}, -1});
    if (const auto* b = applied_binding(plan, r)) {
      launches.back().cpus = b->cpus;
      launches.back().numa_node = b->numa_node;
    }
  }
  return launches;
}

std::size_t rank_pipe_size(std::size_t ranks) {
  constexpr std::size_t kDefault = 64 << 10;
  constexpr std::size_t kMax = 256 << 10;
  constexpr std::size_t kBudget = 16 << 20;
  if (ranks == 0) return 0;
  std::size_t size = kMax;
  while (size > kDefault && size * ranks > kBudget) size /= 2;
  return size > kDefault ? size : 0;
}

// What a rank's child reads until it execs: its request and what that points to.
struct RankProcess::Starting {
  ExecEnvironment env;
  std::vector<const char*> argv;
  BindingMasks binding;
  SpawnRequest req;
  int error = 0;

  explicit Starting(const RankLaunch& launch)
      : env(launch.env, launch.env_overrides), argv(c_strings(launch.argv)), binding(launch) {}
  // Never freed under a child that still reads it, whatever path frees it.
  ~Starting() { settle_spawns(); }
  Starting(const Starting&) = delete;
  Starting& operator=(const Starting&) = delete;
};

RankProcess::RankProcess(boost::asio::io_context& io, const RankLaunch& launch, const rlimit* open_files,
                         std::size_t stdout_pipe, const sigset_t* caught)
    : out_(io), err_(io) {
  start(io, launch, open_files, stdout_pipe, caught);
  if (int error = start_error(); error != 0) throw std::system_error(error, std::generic_category(), launch.executable);
}

RankProcess::RankProcess(boost::asio::io_context& io, const RankLaunch& launch, InBackground, const rlimit* open_files,
                         std::size_t stdout_pipe, const sigset_t* caught)
    : out_(io), err_(io) {
  start(io, launch, open_files, stdout_pipe, caught);
}

void RankProcess::start(boost::asio::io_context& io, const RankLaunch& launch, const rlimit* open_files,
                        std::size_t stdout_pipe, const sigset_t* caught) {
  auto starting = std::make_unique<Starting>(launch);

  // Every rank's stdin: one /dev/null for the whole process, not an open and a close per rank.
  static const int dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  Fds fds;
  if (dev_null < 0 || ::pipe2(fds.fd, O_CLOEXEC) != 0 || ::pipe2(fds.fd + 2, O_CLOEXEC) != 0)
    throw std::system_error(dev_null < 0 ? EBADF : errno, std::generic_category(), launch.executable);
  // Only sgpu's ends: the rank's stay blocking, as a program expects of its stdout.
  ::fcntl(fds.fd[0], F_SETFL, O_NONBLOCK);
  ::fcntl(fds.fd[2], F_SETFL, O_NONBLOCK);
  if (stdout_pipe > 0) ::fcntl(fds.fd[0], F_SETPIPE_SZ, static_cast<int>(stdout_pipe));  // refused: the default

  auto& req = starting->req;
  req.path = launch.executable.c_str();
  req.argv = starting->argv.data();
  req.envp = starting->env.envp();
  req.cwd = launch.cwd.empty() ? nullptr : launch.cwd.c_str();
  req.stdio[0] = dev_null;
  req.stdio[1] = fds.fd[1];
  req.stdio[2] = fds.fd[3];
  req.parent = ::getpid();
  req.open_files = open_files;
  req.caught = caught;
  starting->binding.apply(req);
  child_ = std::make_unique<ChildProcess>(io, req, &starting->error);
  starting_ = std::move(starting);
  // The rank's own ends close here: the child has them, or a slot holds them until it has.
  out_.assign(std::exchange(fds.fd[0], -1));
  err_.assign(std::exchange(fds.fd[2], -1));
}

int RankProcess::start_error() {
  if (!starting_) return 0;
  settle_spawns();
  int error = starting_->error;
  starting_.reset();
  return error;
}

// A rank is never left behind: the ChildProcess kills and reaps one still
// running (a Starting waits for its child's exec first, whichever goes first).
RankProcess::~RankProcess() = default;

int RankProcess::pid() const { return child_->pid(); }
void RankProcess::signal_group(int sig) const { child_->signal_group(sig); }
void RankProcess::signal(int sig) const { child_->signal(sig); }
bool RankProcess::exited() const { return child_->exited(); }
void RankProcess::async_wait(std::function<void(int)> on_exit) { child_->async_wait(std::move(on_exit)); }

}  // namespace sgpu::launcher
