#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/http/status.hpp>

#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/tracking/mlflow.hpp"
#include "tracking/http_client.hpp"
#include "tracking/mlflow_api.hpp"
#include "tracking/mlflow_run.hpp"

namespace sgpu::launcher {
namespace {

using Steady = std::chrono::steady_clock;
using mlflow::HttpResult;
using mlflow::Request;

constexpr std::uintmax_t kArtifactLimit = 64 << 20;
// The params (and spec.json) go out once the ranks have run this long; a
// job that ends sooner logs them with its metrics, in one call less, and
// when it succeeded its summary.json stands for spec.json and events.jsonl.
constexpr auto kParamsAfter = std::chrono::seconds(1);

std::string status_text(int status) {
  auto reason = boost::beast::http::obsolete_reason(boost::beast::http::int_to_status(static_cast<unsigned>(status)));
  return reason.empty() ? std::to_string(status) : fmt::format("{} {}", status, std::string_view(reason));
}

std::optional<std::string> read_whole(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec || size > kArtifactLimit) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

struct MlflowTracker::Impl {
  boost::asio::io_context& io;
  MlflowConfig config;
  mlflow::HttpClient client;
  std::optional<TrackedRun> run;
  std::string artifact_uri;
  // Multi-node: the ranks per node are known once the nodes have joined, after
  // the run was made; end() logs the world size then.
  bool world_size_logged = false;
  std::set<std::string> uploaded;    // artifacts sent before the end (upload_now), not failed
  mlflow::KeyValues pending_params;  // not sent yet (kParamsAfter)
  std::vector<std::pair<std::string, std::string>> pending_uploads;  // upload_now's, until kParamsAfter
  bool ran_long = false;                                             // the ranks ran kParamsAfter
  boost::asio::steady_timer params_timer;
  bool ending = false;  // end() has begun
  // --sample-every's samples as system metrics: one log-batch in flight at a
  // time, what comes meanwhile goes with the next; the first failure is
  // warned of and ends them (the job's own metrics are not held up).
  std::vector<mlflow::Metric> pending_samples;
  std::map<std::string, std::int64_t> samples_per_node;
  bool samples_in_flight = false;
  bool samples_failed = false;
  bool begun = false;  // begin() sent the run's creation; await_run() has not waited for it yet

  // One phase (begin or end): its deadline and its first failure. The
  // params of begin may still be in flight when end starts: each call
  // records its failure in the phase that sent it.
  Steady::time_point deadline;
  int in_flight = 0;  // the calls of both phases
  std::string begin_failure;
  std::string end_failure;
  std::string* failure = &begin_failure;  // the current phase's

  Impl(boost::asio::io_context& i, MlflowConfig c)
      : io(i),
        config(std::move(c)),
        client(i, *mlflow::parse_server_url(config.uri),
               mlflow::authorization(config.token, config.username, config.password),
               {config.insecure_tls, config.ca_file}),
        params_timer(i) {}

  std::string server() const { return client.server().display(); }

  void warn(const std::string& what) const {
    auto line = fmt::format("sgpu: warning: mlflow: {} {}\n", server(), what);
    line = mlflow::scrub(mlflow::scrub(std::move(line), config.token), config.password);
    diagnostic(line);
  }

  // Why a call did not do what it should, in words a user can act on; the
  // credentials are named, never shown.
  std::string explain(const Request& request, const HttpResult& result) const {
    if (result.status == 0) return fmt::format("{}: {}", request.call, result.error);
    auto error = mlflow::response_error({result.status, result.body});
    auto text = fmt::format("answered {} to {}", status_text(result.status), request.call);
    if (error && !error->message.empty()) text += ": " + error->message;
    if (result.status == 401 || result.status == 403) {
      if (!config.token.empty())
        text += " (MLFLOW_TRACKING_TOKEN was sent; check it)";
      else if (!config.username.empty() || !config.password.empty())
        text += " (MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD were sent; check them)";
      else
        text += " (set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)";
    }
    return text;
  }

  // Sends `request`; `then` gets a 2xx answer. Any other ending records the
  // phase's first failure, unless `handled` takes it.
  void call(Request request, std::function<void(const HttpResult&)> then, std::function<bool()> handled = nullptr) {
    ++in_flight;
    auto shared = std::make_shared<Request>(std::move(request));
    client.send(
        *shared, deadline,
        [this, shared, slot = failure, then = std::move(then), handled = std::move(handled)](HttpResult result) {
          --in_flight;
          if (result.status >= 200 && result.status < 300) {
            if (then) then(result);
            return;
          }
          if (handled && handled()) return;
          if (slot->empty()) *slot = explain(*shared, result);
        });
  }

  // Runs the loop until the phase's calls have ended (each ends by the
  // deadline), or until `enough` says the rest may go on beside the job.
  void wait(const std::function<bool()>& enough = {}) {
    io.restart();
    while (in_flight > 0 && !(enough && enough()) && io.run_one() > 0) {
    }
    io.restart();  // run_one() may have stopped it for want of work: the Supervisor runs it next
  }

  void start_phase(std::string& phase_failure) {
    deadline = Steady::now() + config.timeout;
    failure = &phase_failure;
    failure->clear();
  }

  // Sends the file `path` as the run's artifact `name`; empty and missing
  // files are skipped. False when the run's artifacts do not go through the
  // server's proxy: nothing can be uploaded.
  bool upload(const std::string& path, const std::string& name, std::function<bool()> handled = nullptr) {
    auto bytes = read_whole(path);
    if (!bytes || bytes->empty()) return true;  // an empty log says nothing: one request less
    auto put =
        mlflow::upload_artifact(client.server(), artifact_uri, name, mlflow::masked_artifact(name, std::move(*bytes)));
    if (!put) return false;
    call(std::move(*put), nullptr, std::move(handled));
    return true;
  }

  // --- begin: experiment, run, params ---

  void with_experiment(std::function<void(std::string)> next) {
    auto server_url = client.server();
    if (!config.experiment_name.empty()) {
      ++in_flight;  // the look-up may be answered with 404 and need a create
      auto lookup = mlflow::get_experiment_by_name(server_url, config.experiment_name);
      client.send(lookup, deadline, [this, lookup, server_url, next](HttpResult result) {
        --in_flight;
        if (result.status == 200) {
          if (auto id = mlflow::parse_experiment_id(result.body)) return next(*id);
        }
        auto error = mlflow::response_error({result.status, result.body});
        if (result.status == 404 || (error && error->code == "RESOURCE_DOES_NOT_EXIST")) {
          call(mlflow::create_experiment(server_url, config.experiment_name), [this, next](const HttpResult& created) {
            if (auto id = mlflow::parse_experiment_id(created.body)) return next(*id);
            *failure = "experiments/create: an answer without an experiment id";
          });
          return;
        }
        *failure = result.status == 200 ? "experiments/get-by-name: an answer without an experiment id"
                                        : explain(lookup, result);
      });
      return;
    }
    if (!config.experiment_id.empty()) return next(config.experiment_id);
    if (!config.parent_run_id.empty()) {  // a child run lives in its parent's experiment
      call(mlflow::get_run(server_url, config.parent_run_id), [this, next](const HttpResult& result) {
        if (auto info = mlflow::parse_run_info(result.body)) return next(info->experiment_id);
        *failure = "runs/get: an answer without the parent run (MLFLOW_RUN_ID)";
      });
      return;
    }
    next("0");  // the server's Default experiment
  }

  void create_run(const RunDescription& job, const std::string& experiment_id) {
    auto server_url = client.server();
    auto tags = mlflow::run_tags(job, mlflow::git_commit(job.cwd), config.parent_run_id);
    auto name = config.run_name.empty() ? job.sgpu_run_id : config.run_name;
    auto start = mlflow::epoch_ms(Clock::now());
    call(mlflow::create_run(server_url, experiment_id, name, start, tags),
         [this, job, server_url](const HttpResult& r) {
           auto info = mlflow::parse_run_info(r.body);
           if (!info) {
             *failure = "runs/create: an answer without a run id";
             return;
           }
           TrackedRun t;
           t.run_id = info->run_id;
           t.experiment_id = info->experiment_id;
           t.url = mlflow::run_link(server_url, info->experiment_id, info->run_id);
           t.env = {{"MLFLOW_TRACKING_URI", config.uri},
                    {"MLFLOW_RUN_ID", info->run_id},
                    {"MLFLOW_EXPERIMENT_ID", info->experiment_id}};
           artifact_uri = info->artifact_uri;
           run = std::move(t);
           pending_params = mlflow::run_params(job);
         });
  }

  void send_samples() {
    if (samples_in_flight || pending_samples.empty() || ending) return;
    auto batches = mlflow::log_batches(client.server(), run->run_id, std::exchange(pending_samples, {}), {}, {});
    auto left = std::make_shared<std::size_t>(batches.size());
    samples_in_flight = true;
    for (auto& batch : batches) {
      auto shared = std::make_shared<Request>(std::move(batch));
      client.send(*shared, Steady::now() + config.timeout, [this, shared, left](HttpResult result) {
        bool ok = result.status >= 200 && result.status < 300;
        if (!ok && !samples_failed && !ending) {
          samples_failed = true;
          warn("did not take the job's system metrics (" + explain(*shared, result) + "); no more are sent");
        }
        if (--*left == 0) {
          samples_in_flight = false;
          if (!samples_failed) send_samples();
        }
      });
    }
  }

  // The ranks have run kParamsAfter: the params and the early artifacts go out.
  void send_params() {
    ran_long = true;
    deadline = Steady::now() + config.timeout;  // from now: the run was made a while ago
    if (!pending_params.empty()) {
      for (auto& batch : mlflow::log_batches(client.server(), run->run_id, {}, pending_params, {}))
        call(std::move(batch), nullptr);
      pending_params.clear();
    }
    for (const auto& [path, name] : std::exchange(pending_uploads, {})) upload_early(path, name);
  }

  // Failed before the end: the end sends it again, and only that try counts.
  void upload_early(const std::string& path, const std::string& name) {
    auto again = [this, name] { return !ending && uploaded.erase(name) > 0; };
    if (upload(path, name, again)) uploaded.insert(name);
  }
};

MlflowTracker::MlflowTracker(boost::asio::io_context& io, MlflowConfig config)
    : impl_(std::make_unique<Impl>(io, std::move(config))) {}

MlflowTracker::~MlflowTracker() = default;

void MlflowTracker::begin(const RunDescription& job) {
  auto& s = *impl_;
  s.start_phase(s.begin_failure);
  s.begun = true;
  s.world_size_logged = job.world_size > 0;
  s.with_experiment([&s, job](const std::string& experiment_id) { s.create_run(job, experiment_id); });
}

std::optional<TrackedRun> MlflowTracker::await_run(const std::function<bool()>& give_up) {
  auto& s = *impl_;
  if (!s.begun) return std::nullopt;
  s.begun = false;
  // The ranks need only the run's id: its params go on beside the job, on
  // the same loop, once it has run kParamsAfter (end() waits for them, and
  // says so if they failed), or with the end's metrics.
  s.wait([&s, &give_up] { return s.run.has_value() || (give_up && give_up()); });
  if (!s.run && give_up && give_up()) {
    s.client.cancel_all();
    return std::nullopt;
  }
  if (!s.run) {
    s.warn(s.begin_failure + "; the job runs untracked");
    s.client.cancel_all();
    return std::nullopt;
  }
  s.params_timer.expires_after(kParamsAfter);
  s.params_timer.async_wait([&s](boost::system::error_code ec) {
    if (!ec) s.send_params();
  });
  diagnostic("sgpu: mlflow run {}\n", s.run->url);
  return s.run;
}

void MlflowTracker::upload_now(const std::string& path, const std::string& name) {
  auto& s = *impl_;
  if (!s.run || s.ending) return;
  if (s.ran_long)
    s.upload_early(path, name);
  else
    s.pending_uploads.emplace_back(path, name);
}

void MlflowTracker::ranks_ended() { impl_->params_timer.cancel(); }

void MlflowTracker::log_sample(const NodeSample& sample, bool several_nodes) {
  auto& s = *impl_;
  if (!s.run || s.ending || s.samples_failed) return;
  auto step = s.samples_per_node[sample.host]++;
  for (auto& m : mlflow::sample_metrics(sample, several_nodes, step)) s.pending_samples.push_back(std::move(m));
  s.send_samples();
}

void MlflowTracker::end(const RunEnd& end) {
  auto& s = *impl_;
  if (!s.run) return;
  // The params may still be in flight (a short job): the end goes beside
  // them, not after them; the server takes them in any order.
  s.start_phase(s.end_failure);
  s.ending = true;
  s.params_timer.cancel();
  auto server_url = s.client.server();
  const auto& run_id = s.run->run_id;
  s.call(mlflow::update_run(server_url, run_id, mlflow::run_status(end.end), mlflow::epoch_ms(end.ended)), nullptr);
  auto late_params = std::move(s.pending_params);  // a short job: one call for params and metrics
  s.pending_params.clear();
  if (!s.world_size_logged && !end.ranks.empty())
    late_params.emplace_back("sgpu.world_size", std::to_string(end.ranks.size()));
  for (auto& batch :
       mlflow::log_batches(server_url, run_id, mlflow::end_metrics(end), late_params, mlflow::end_tags(end)))
    s.call(std::move(batch), nullptr);
  bool proxied = true;
  bool brief = !s.ran_long && end.exit_code == 0;
  s.pending_uploads.clear();  // sent below, unless brief
  for (const auto& [path, name] : end.artifacts) {
    if (s.uploaded.contains(name)) continue;
    if (brief &&
        std::find(end.detail_artifacts.begin(), end.detail_artifacts.end(), name) != end.detail_artifacts.end())
      continue;
    if (!s.upload(path, name)) {
      proxied = false;
      break;
    }
  }
  s.wait();
  if (!s.begin_failure.empty())
    s.warn(s.begin_failure + " (sent beside the job: the run's params or spec.json may be missing)");
  if (!proxied)
    s.warn(
        fmt::format("stores this run's artifacts at {}, not behind its artifact proxy (mlflow-artifacts:/); "
                    "sgpu uploads none (run the server with --serve-artifacts)",
                    s.artifact_uri));
  if (!s.end_failure.empty()) s.warn(s.end_failure + fmt::format(" (run {})", s.run->url));
}

}  // namespace sgpu::launcher
