#include "preflight/allreduce_run.hpp"

#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <array>
#include <fstream>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <boost/asio/buffers_iterator.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>

#include "sgpu/launcher/preflight/worker.hpp"
#include "sgpu/launcher/process/rank_process.hpp"

namespace sgpu::launcher::preflight {
namespace asio = boost::asio;
namespace {

constexpr std::size_t kStderrTail = 4096;

std::string gpu_name(const env::Gpu& g) {
  return g.pci_bus_id.empty() ? fmt::format("GPU {}", g.index) : fmt::format("GPU {} ({})", g.index, g.pci_bus_id);
}

std::string join_sizes(const std::vector<std::uint64_t>& sizes) {
  std::string out;
  for (auto s : sizes) out += (out.empty() ? "" : ",") + std::to_string(s);
  return out;
}

}  // namespace

struct AllReduceRun::Impl : std::enable_shared_from_this<AllReduceRun::Impl> {
  Impl(asio::io_context& io, PreflightRequest request, AllReduceShare share,
       std::function<void(AllReduceOutcome)> on_done)
      : io_(io),
        request_(std::move(request)),
        share_(std::move(share)),
        on_done_(std::move(on_done)),
        timer_(io),
        workers_(request_.gpus.size()) {
    // The worker is this very binary unless the request names another; resolve
    // /proc/self/exe here, so messages name the file.
    std::error_code ec;
    auto resolved = std::filesystem::read_symlink(request_.worker_executable, ec);
    executable_ = ec ? request_.worker_executable.string() : resolved.string();
    if (share_.nranks == 0) share_.nranks = static_cast<int>(workers_.size());
  }

  void begin() {
    timer_.expires_after(request_.timeout);
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->on_timeout();
      self->timer_done_ = true;
      self->maybe_finish();
    });
    if (workers_.empty()) return stop();
    if (share_.rank_base == 0) start(0, "");
  }

  void unique_id(const std::string& id) {
    if (share_.rank_base == 0 || started_any_ || stopping_) return;
    for (std::size_t r = 0; r < workers_.size() && !stopping_; ++r) start(r, id);
  }

  // The owner is gone: kill what runs, report to nobody.
  void abandon() {
    on_done_ = nullptr;
    share_.on_unique_id = nullptr;  // its owner is going too
    stop();
  }

 private:
  struct Worker {
    std::unique_ptr<RankProcess> process;
    asio::streambuf out;
    std::array<char, 4096> err_chunk{};
    std::string err_tail;
    std::ofstream err_log;
    bool running = false;
    bool done = false;
    std::map<std::uint64_t, double> times_us;  // by size
  };

  int global_rank(std::size_t local) const { return share_.rank_base + static_cast<int>(local); }

  void start(std::size_t rank, const std::string& unique_id) {
    started_any_ = true;
    RankLaunch launch;
    launch.rank = global_rank(rank);
    launch.executable = executable_;
    launch.argv = {"sgpu",
                   "doctor",
                   "--worker",
                   "--rank",
                   std::to_string(global_rank(rank)),
                   "--nranks",
                   std::to_string(share_.nranks),
                   "--device",
                   std::to_string(rank),
                   "--sizes",
                   join_sizes(request_.sizes),
                   "--warmup",
                   std::to_string(request_.warmup),
                   "--iters",
                   std::to_string(request_.iters)};
    launch.env = request_.environment;
    std::string visible;
    for (const auto& g : request_.gpus) visible += (visible.empty() ? "" : ",") + std::to_string(g.index);
    launch.env["CUDA_VISIBLE_DEVICES"] = visible;
    launch.env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
    if (!unique_id.empty()) launch.env[kUniqueIdVariable] = unique_id;
    launch.cwd = "/";
    auto& w = workers_[rank];
    if (!request_.run_dir.empty()) {
      std::filesystem::create_directories(request_.run_dir / "preflight");
      w.err_log.open(request_.run_dir / "preflight" / fmt::format("worker-{}.stderr", global_rank(rank)),
                     std::ios::binary);
    }
    try {
      w.process = std::make_unique<RankProcess>(io_, launch);
    } catch (const std::system_error& e) {
      fail(fmt::format("{}: cannot start the worker {}: {}", gpu_name(request_.gpus[rank]), launch.executable,
                       e.what()));
      return;
    }
    w.running = true;
    ++running_;
    open_streams_ += 2;
    read_line(rank);
    read_err(rank);
    w.process->async_wait([self = shared_from_this(), rank](int status) { self->on_exit(rank, status); });
  }

  void read_line(std::size_t rank) {
    auto& w = workers_[rank];
    asio::async_read_until(w.process->out(), w.out, '\n',
                           [self = shared_from_this(), rank](boost::system::error_code ec, std::size_t n) {
                             if (ec) return self->stream_closed();
                             auto& wk = self->workers_[rank];
                             std::string line(asio::buffers_begin(wk.out.data()),
                                              asio::buffers_begin(wk.out.data()) + static_cast<long>(n));
                             wk.out.consume(n);
                             self->on_line(rank, line);
                             self->read_line(rank);
                           });
  }

  void read_err(std::size_t rank) {
    auto& w = workers_[rank];
    w.process->err().async_read_some(asio::buffer(w.err_chunk),
                                     [self = shared_from_this(), rank](boost::system::error_code ec, std::size_t n) {
                                       if (ec) return self->stream_closed();
                                       auto& wk = self->workers_[rank];
                                       if (wk.err_log.is_open())
                                         wk.err_log.write(wk.err_chunk.data(), static_cast<std::streamsize>(n));
                                       wk.err_tail.append(wk.err_chunk.data(), n);
                                       if (wk.err_tail.size() > kStderrTail)
                                         wk.err_tail.erase(0, wk.err_tail.size() - kStderrTail);
                                       self->read_err(rank);
                                     });
  }

  void stream_closed() {
    --open_streams_;
    maybe_finish();
  }
  void on_line(std::size_t rank, const std::string& text) {
    auto line = nlohmann::json::parse(text, nullptr, false);
    if (line.is_discarded() || !line.is_object()) return;  // a library printing on stdout
    auto event = line.value("event", "");
    const auto& gpu = request_.gpus[rank];
    if (event == "unique_id" && global_rank(rank) == 0) {
      auto id = line.value("id", "");
      if (share_.on_unique_id) share_.on_unique_id(id);
      for (std::size_t r = 1; r < workers_.size() && !stopping_; ++r) start(r, id);
    } else if (event == "ready") {
      outcome_.nccl_version = line.value("nccl_version", 0);
    } else if (event == "size") {
      auto bytes = line.value("bytes", std::uint64_t{0});
      workers_[rank].times_us[bytes] = line.value("time_us", 0.0);
      if (auto wrong = line.value("wrong", std::uint64_t{0}); wrong > 0) {
        const auto& first = line["first_wrong"];
        fail(fmt::format("{}: {} of {} values wrong after the {} all-reduce (element {}: {} instead of {})",
                         gpu_name(gpu), wrong, bytes / 4, format_bytes(bytes), first.value("index", 0),
                         first.value("got", 0.0), first.value("want", 0.0)));
      }
    } else if (event == "done") {
      workers_[rank].done = true;
    } else if (event == "error") {
      auto kind = line.value("kind", "");
      auto message = line.value("message", "");
      if (kind == "no_driver" || kind == "no_nccl" || kind == "no_gpu" || kind == "unsupported") {
        if (outcome_.unavailable.empty()) outcome_.unavailable = message;
        stop();
      } else {
        fail(fmt::format("{}: {}", gpu_name(gpu), message));
      }
    }
  }

  void on_exit(std::size_t rank, int status) {
    auto& w = workers_[rank];
    w.running = false;
    --running_;
    if (!stopping_ && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      std::string how = WIFSIGNALED(status) ? fmt::format("was killed by signal {}", WTERMSIG(status))
                                            : fmt::format("exited with {}", WEXITSTATUS(status));
      auto tail = w.err_tail;
      while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
      if (auto nl = tail.rfind('\n'); nl != std::string::npos) tail = tail.substr(nl + 1);
      fail(fmt::format("{}: the all-reduce worker {}{}", gpu_name(request_.gpus[rank]), how,
                       tail.empty() ? "" : ": " + tail));
    }
    maybe_finish();
  }

  void on_timeout() {
    // Name the size the workers were at, and the GPUs that had not finished it.
    std::size_t next = 0;
    for (const auto& w : workers_) next = std::max(next, w.times_us.size());
    std::string at = next < request_.sizes.size() ? " at " + format_bytes(request_.sizes[next]) : "";
    std::string stuck;
    for (std::size_t r = 0; r < workers_.size(); ++r) {
      if (!workers_[r].done && workers_[r].times_us.size() <= next)
        stuck += (stuck.empty() ? "" : ", ") + gpu_name(request_.gpus[r]);
    }
    if (!started_any_) {
      fail(
          fmt::format("rank 0's NCCL unique id did not reach this node within {}s: node 0's workers did not get "
                      "that far",
                      static_cast<double>(request_.timeout.count()) / 1000.0));
      return;
    }
    bool joined = outcome_.nccl_version != 0;
    fail(fmt::format("the {} did not finish within {}s{}: {} did not report{}",
                     joined ? "all-reduce" : "NCCL communicator setup",
                     static_cast<double>(request_.timeout.count()) / 1000.0, at, stuck.empty() ? "every GPU" : stuck,
                     joined ? " (a hung link or GPU)" : ""));
  }

  void fail(std::string why) {
    if (!stopping_) outcome_.failures.push_back(std::move(why));
    stop();
  }

  void stop() {
    if (stopping_) return;
    stopping_ = true;
    for (auto& w : workers_) {
      if (w.running) w.process->signal_group(SIGKILL);  // a worker stuck in NCCL heeds nothing gentler
    }
    maybe_finish();
  }

  bool all_done() const {
    for (const auto& w : workers_) {
      if (!w.done) return false;
    }
    return true;
  }
  // Once every worker started has exited and its output is read: the result,
  // unless more workers are to come (an id awaited, no failure yet).
  void maybe_finish() {
    if (finished_ || running_ > 0 || open_streams_ > 0) return;
    if (!(stopping_ || all_done() || all_started_exited())) return;
    if (!timer_done_) {
      timer_.cancel();  // its handler comes back here
      return;
    }
    finished_ = true;
    collect_sizes();
    if (outcome_.failures.empty() && outcome_.unavailable.empty() && !all_done())
      outcome_.failures.push_back("the all-reduce workers ended without finishing");
    if (on_done_)
      asio::post(io_,
                 [done = std::move(on_done_), outcome = std::move(outcome_)]() mutable { done(std::move(outcome)); });
  }

  bool all_started_exited() const {
    for (const auto& w : workers_) {
      if (w.process == nullptr) return false;
    }
    return true;
  }

  void collect_sizes() {
    for (auto bytes : request_.sizes) {
      SizeRow row;
      row.bytes = bytes;
      for (const auto& w : workers_) {
        auto it = w.times_us.find(bytes);
        if (it == w.times_us.end()) return;
        row.rank_times_us.push_back(it->second);
      }
      row.bandwidth = bandwidth(bytes, row.rank_times_us);
      outcome_.sizes.push_back(std::move(row));
    }
  }

  asio::io_context& io_;
  PreflightRequest request_;
  AllReduceShare share_;
  std::function<void(AllReduceOutcome)> on_done_;
  std::string executable_;
  asio::steady_timer timer_;
  std::vector<Worker> workers_;
  std::size_t running_ = 0;
  int open_streams_ = 0;
  bool started_any_ = false;
  bool stopping_ = false;
  bool timer_done_ = false;
  bool finished_ = false;
  AllReduceOutcome outcome_;
};

AllReduceRun::AllReduceRun(asio::io_context& io, const PreflightRequest& request, AllReduceShare share,
                           std::function<void(AllReduceOutcome)> on_done)
    : impl_(std::make_shared<Impl>(io, request, std::move(share), std::move(on_done))) {
  impl_->begin();
}

AllReduceRun::~AllReduceRun() { impl_->abandon(); }

void AllReduceRun::unique_id(const std::string& hex) { impl_->unique_id(hex); }

AllReduceOutcome run_allreduce(const PreflightRequest& request) {
  if (request.gpus.empty()) return {};
  asio::io_context io(1);
  AllReduceOutcome outcome;
  AllReduceRun run(io, request, {}, [&](AllReduceOutcome o) { outcome = std::move(o); });
  io.run();
  return outcome;
}

}  // namespace sgpu::launcher::preflight
