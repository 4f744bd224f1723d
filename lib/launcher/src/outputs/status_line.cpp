#include "sgpu/launcher/outputs/status_line.hpp"

#include <cmath>

#include <fmt/format.h>

namespace sgpu::launcher {

namespace {
constexpr auto kTick = std::chrono::seconds(1);

const char* teardown_reason(const env::JobEnd& cause) {
  switch (cause.kind) {
    case env::JobEnd::Kind::RankFailed:
      return "a rank failed";
    case env::JobEnd::Kind::TimedOut:
      return "timed out";
    case env::JobEnd::Kind::Interrupted:
      return "interrupted";
    case env::JobEnd::Kind::SpawnFailed:
      return "a rank could not start";
    case env::JobEnd::Kind::NodeLost:
      return "a node was lost";
    case env::JobEnd::Kind::StoppedByScheduler:
      return "the scheduler stopped it";
    case env::JobEnd::Kind::NotStarted:
      return "it could not start";
    case env::JobEnd::Kind::Hung:
      return "hung";
    case env::JobEnd::Kind::Preempted:
      return "preempted";
    case env::JobEnd::Kind::Completed:
      break;
  }
  return "ending";
}
}  // namespace

std::string format_clock(env::Seconds d) {
  auto total = static_cast<long long>(std::floor(std::max(0.0, d.count())));
  return fmt::format("{}:{:02d}:{:02d}", total / 3600, (total % 3600) / 60, total % 60);
}

std::string format_status(const StatusSnapshot& s) {
  std::string out = "sgpu: ";
  if (!s.stopping.empty()) out += fmt::format("stopping ({}): ", s.stopping);
  out += fmt::format("{} running, {} exited", s.running, s.exited);
  if (s.failed > 0) out += fmt::format(" ({} failed)", s.failed);
  out += fmt::format(" of {} | {} elapsed", s.world_size, format_clock(s.elapsed));
  if (s.left) out += fmt::format(" | {} left", format_clock(*s.left));
  if (s.network_check_ms) out += fmt::format(" | network checked in {:.1f}ms", *s.network_check_ms);
  return out;
}

StatusLine::StatusLine(boost::asio::io_context& io, ConsoleSink& sink, int world_size,
                       std::optional<env::Seconds> timeout)
    : sink_(sink), timer_(io), timeout_(timeout) {
  snapshot_.world_size = world_size;
}

void StatusLine::on_rank_started(int, int) {
  ++started_ranks_;
  ++snapshot_.running;
  if (ticking_) return;
  ticking_ = true;
  auto now = std::chrono::steady_clock::now();
  if (!clock_started_) {
    clock_started_ = true;
    started_ = now;
  }
  // Aligned to whole seconds since the run started, also after a restart.
  timer_.expires_at(started_ + kTick * (1 + (now - started_) / kTick));
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) tick();
  });
}

void StatusLine::tick() {
  if (!ticking_) return;
  shown_ = true;
  draw();
  // Aligned to whole seconds since the start, so the clock never skips one.
  timer_.expires_at(timer_.expiry() + kTick);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) tick();
  });
}

void StatusLine::draw() {
  snapshot_.elapsed = std::chrono::steady_clock::now() - started_;
  if (timeout_) snapshot_.left = *timeout_ - snapshot_.elapsed;
  sink_.set_status(format_status(snapshot_));
}

void StatusLine::on_rank_exited(int, const env::ExitStatus& status, bool terminated_by_sgpu) {
  --snapshot_.running;
  ++snapshot_.exited;
  if (!status.success() && !terminated_by_sgpu) ++snapshot_.failed;
  // Every started rank is gone and no more will start: the job is over. The
  // timer must not keep the event loop alive, and the report comes next.
  if (snapshot_.running == 0 && (started_ranks_ == snapshot_.world_size || torn_down_)) {
    stop();
  } else if (shown_) {
    draw();
  }
}

void StatusLine::on_teardown(const env::JobEnd& cause) {
  torn_down_ = true;
  snapshot_.stopping = teardown_reason(cause);
  if (snapshot_.running == 0) {
    stop();
  } else if (shown_) {
    draw();
  }
}

void StatusLine::on_restart(int, const env::JobEnd&, env::Seconds) {
  stop();
  auto world_size = snapshot_.world_size;
  snapshot_ = {};
  snapshot_.world_size = world_size;
  started_ranks_ = 0;
  torn_down_ = false;
}

void StatusLine::stop() {
  ticking_ = false;
  shown_ = false;
  timer_.cancel();
  sink_.clear_status();
}

}  // namespace sgpu::launcher
