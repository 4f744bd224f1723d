#include "sgpu/launcher/metrics/sampler.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <set>

#include <fmt/format.h>

#include "metrics/gpu_sampler.hpp"
#include "sgpu/launcher/metrics/sampling.hpp"

namespace sgpu::launcher::metrics {
namespace {
constexpr std::size_t kStatBytes = 1024;
constexpr std::size_t kHeartbeatTail = 256;

// The whole small file at `path` (a /proc file has no size to stat).
std::optional<std::string> read_small(const char* path, std::size_t limit) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::nullopt;
  std::string text(limit, '\0');
  ssize_t n = ::read(fd, text.data(), limit);
  ::close(fd);
  if (n < 0) return std::nullopt;
  text.resize(static_cast<std::size_t>(n));
  return text;
}

struct Heartbeat {
  std::optional<std::int64_t> step;
  std::optional<double> age_s;
};

// A regular file only: its mtime and the step its end names.
Heartbeat read_heartbeat(const std::string& path) {
  Heartbeat hb;
  if (path.empty()) return hb;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return hb;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    struct timespec now {};
    ::clock_gettime(CLOCK_REALTIME, &now);
    double age = static_cast<double>(now.tv_sec - st.st_mtim.tv_sec) +
                 static_cast<double>(now.tv_nsec - st.st_mtim.tv_nsec) / 1e9;
    hb.age_s = std::max(age, 0.0);
    if (st.st_size > 0) {
      auto size = static_cast<std::size_t>(st.st_size);
      std::size_t take = std::min(size, kHeartbeatTail);
      std::string tail(take, '\0');
      ssize_t n = ::pread(fd, tail.data(), take, static_cast<off_t>(size - take));
      if (n > 0) {
        tail.resize(static_cast<std::size_t>(n));
        hb.step = parse_heartbeat_step(tail, take == size);
      }
    }
  }
  ::close(fd);
  return hb;
}
}  // namespace

std::vector<SampledGpu> sampled_gpus(const LaunchPlan& plan) {
  std::vector<SampledGpu> out;
  for (const auto& g : plan.gpus) {
    SampledGpu s{g.index, g.pci_bus_id, g.uuid, {}};
    for (const auto& r : plan.ranks)
      if (std::find(r.gpus.begin(), r.gpus.end(), g.index) != r.gpus.end()) s.ranks.push_back(r.place.rank);
    out.push_back(std::move(s));
  }
  return out;
}

Sampler::Sampler(boost::asio::io_context& io, SamplerOptions options, std::function<std::vector<RunningRank>()> ranks,
                 std::function<void(const NodeSample&)> emit)
    : timer_(io),
      options_(std::move(options)),
      ranks_(std::move(ranks)),
      emit_(std::move(emit)),
      gpus_(std::make_unique<GpuSampler>(options_.gpus)) {
  if (options_.host.empty()) {
    std::array<char, 256> name{};
    options_.host = ::gethostname(name.data(), name.size() - 1) == 0 ? name.data() : "localhost";
  }
}

Sampler::~Sampler() = default;

void Sampler::start() {
  if (options_.every.count() <= 0) return;
  running_ = true;
  next_ = std::chrono::steady_clock::now();
  arm();
}

void Sampler::stop() {
  running_ = false;
  timer_.cancel();
}

void Sampler::arm() {
  auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(options_.every);
  next_ += period;
  // A loop that was busy past a tick samples once, not once per tick missed.
  if (auto now = std::chrono::steady_clock::now(); next_ < now) next_ = now + period;
  timer_.expires_at(next_);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    if (ec || !running_) return;
    auto s = sample();
    if (!s.ranks.empty() || !s.gpus.empty()) emit_(s);
    if (running_) arm();
  });
}

NodeSample Sampler::sample() {
  NodeSample out;
  out.time = std::chrono::system_clock::now();
  out.node = options_.node;
  out.host = options_.host;
  auto now = std::chrono::steady_clock::now();
  static const long ticks_per_second = ::sysconf(_SC_CLK_TCK);
  static const long page = ::sysconf(_SC_PAGESIZE);
  std::vector<std::pair<int, int>> pids;
  std::set<int> seen_pids;
  std::set<int> seen_ranks;
  for (const auto& r : ranks_()) {
    RankSample s;
    s.rank = r.rank;
    s.pid = r.pid;
    auto path = fmt::format("/proc/{}/stat", r.pid);
    auto text = read_small(path.c_str(), kStatBytes);
    auto stat = text ? parse_proc_stat(*text) : std::nullopt;
    if (!stat || !has_own_figures(*stat)) continue;  // gone, or going, between the list and the read
    s.state = stat->state;
    s.threads = stat->threads;
    s.rss_bytes = stat->rss_pages * static_cast<std::uint64_t>(page);
    if (auto prev = cpu_.find(r.pid); prev != cpu_.end())
      s.cpu_percent = cpu_percent(prev->second.ticks, stat->cpu_ticks,
                                  std::chrono::duration<double>(now - prev->second.at).count(), ticks_per_second);
    cpu_[r.pid] = {stat->cpu_ticks, now};
    auto hb = read_heartbeat(r.heartbeat);
    s.progress_age_s = hb.age_s;
    s.step = hb.step;
    if (hb.step) {
      auto prev = steps_.find(r.rank);
      if (prev != steps_.end() && prev->second.pid == r.pid && *hb.step >= prev->second.step) {
        double seconds = std::chrono::duration<double>(now - prev->second.at).count();
        if (seconds > 0) s.step_rate = static_cast<double>(*hb.step - prev->second.step) / seconds;
      }
      steps_[r.rank] = {r.pid, *hb.step, now};
    }
    seen_pids.insert(r.pid);
    seen_ranks.insert(r.rank);
    pids.emplace_back(r.pid, r.rank);
    out.ranks.push_back(s);
  }
  std::erase_if(cpu_, [&](const auto& e) { return !seen_pids.contains(e.first); });
  std::erase_if(steps_, [&](const auto& e) { return !seen_ranks.contains(e.first); });
  if (!out.ranks.empty()) out.gpus = gpus_->sample(pids);
  return out;
}

}  // namespace sgpu::launcher::metrics
