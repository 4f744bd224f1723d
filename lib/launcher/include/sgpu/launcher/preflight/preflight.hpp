#pragma once
// The GPU preflight behind `sgpu doctor` and `sgpu launch --preflight`: NVML
// health and topology of the job's GPUs, then an NCCL all-reduce across them,
// one worker process per GPU (`sgpu doctor --worker`), all on one event loop
// with a time limit, so a hung all-reduce costs the limit and no more.
//
// Rank 0's NCCL unique id reaches the other workers through sgpu: it reads it
// from rank 0's output and starts the others with it in their environment.
// Across nodes (NodePreflight, run by each node's agent) it goes through the
// rendezvous: node 0 sends it to the launcher, which passes it to the others;
// each node's report comes back the same way, and the launcher judges them
// together (combine_reports).
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/env/gpu.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/preflight/checks.hpp"
#include "sgpu/launcher/preflight/health.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher::preflight {

// Exit codes of `sgpu doctor` (README "sgpu doctor").
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitUnavailable = 3;  // no driver, no NCCL, no GPU: nothing could be checked

struct PreflightRequest {
  std::vector<env::Gpu> gpus;                                  // the job's GPUs; index = CUDA index in PCI bus order
  env::Environment environment;                                // what the workers inherit
  std::filesystem::path worker_executable = "/proc/self/exe";  // an sgpu with `doctor --worker`
  std::vector<std::uint64_t> sizes = allreduce_sizes(8, 1ULL << 30, 2);
  int warmup = 5;
  int iters = 20;
  std::chrono::milliseconds timeout = std::chrono::minutes(3);
  std::optional<double> expect_busbw;  // overrides the expectation table
  std::filesystem::path run_dir;       // preflight.json and the workers' stderr go here; empty: nowhere
};

struct SizeRow {
  std::uint64_t bytes = 0;
  Bandwidth bandwidth;
  std::vector<double> rank_times_us;
};

struct GpuRow {
  GpuHealth health;
  Judgement judgement;
};
struct LinkRow {
  LinkHealth link;
  Judgement judgement;
};

struct PreflightResult {
  enum class Status { healthy, failed, unavailable };
  Status status = Status::healthy;
  std::string unavailable;  // one line: "no NVIDIA driver: ...", "no NCCL: ...", "no GPU: ..."
  Verdict verdict = Verdict::pass;
  bool health_read = false;
  std::string health_note;  // why NVML's facts are missing
  std::vector<GpuRow> gpus;
  std::vector<LinkRow> links;
  std::vector<SizeRow> sizes;
  Judgement allreduce;  // values, workers, time limit, bandwidth
  std::optional<Expectation> expectation;
  int nccl_version = 0;
  double duration_s = 0;
  std::vector<std::string> failures;  // every failed check, naming its GPU
};

// Runs the whole preflight; never throws for what the GPUs do (that is the
// result), only sgpu::Error for a bad request.
PreflightResult run_preflight(const PreflightRequest& request);

// What a job spec's [preflight] table asks for: sizes from 8 B to its
// max_bytes, its iterations, time limit and expectation; the GPUs, the
// environment and the report's directory are the caller's to fill. Throws
// sgpu::Error (exit 2) naming the key at fault, so a launch checks it before
// anything starts.
PreflightRequest preflight_request(const JobSpec& spec);

// For `sgpu launch --preflight`: `request` on exactly these GPUs (sgpu's
// indices, as the job's plan names them), found on this node; the report is
// kept in request.run_dir/preflight.json. Throws sgpu::Error for an index
// this node lacks.
PreflightResult preflight_gpus(const std::vector<int>& gpu_indices, PreflightRequest request);

// --- across nodes ---

// One node's share of a preflight across nodes, run by its agent between
// the rendezvous's Assign and Ready: the health of `request.gpus` (this
// node's GPUs of the job) and one worker per GPU in an all-reduce over every
// node's, as global ranks rank_base.. of nranks. Node 0 (rank_base 0) starts
// its first worker at once and hands its NCCL unique id to `on_unique_id`;
// the others start once unique_id() brings it. `on_report` gets this node's
// report (JSON text, facts only: the launcher judges) once, from the loop,
// when its workers have ended or the request's time limit has passed.
// Destroying it kills the workers still running.
class NodePreflight {
 public:
  NodePreflight(boost::asio::io_context& io, PreflightRequest request, int rank_base, int nranks,
                std::function<void(const std::string&)> on_unique_id, std::function<void(std::string)> on_report);
  ~NodePreflight();
  NodePreflight(const NodePreflight&) = delete;
  NodePreflight& operator=(const NodePreflight&) = delete;
  void unique_id(const std::string& hex);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// A node's report as the launcher got it.
struct NodeReport {
  std::string node;    // its name, in every GPU, link and failure
  std::string report;  // NodePreflight's JSON text
};

// One result from the nodes' reports, in node-rank order: their GPUs and
// links, and one all-reduce table over all the ranks. `complete` is false
// while reports are still to come: what has failed so far is judged, the
// bandwidth is not (result.allreduce fails only for the workers' failures). Across nodes the bandwidth depends on the
// network, so only request.expect_busbw sets an expectation. Pure: never
// throws; a report it cannot read is a failure naming its node.
PreflightResult combine_reports(const std::vector<NodeReport>& nodes, const PreflightRequest& request, bool complete);

// Writes `result` as run_dir/preflight.json. Throws sgpu::Error.
void keep_report(const PreflightResult& result, const std::filesystem::path& run_dir);
// "GPU 1 (00000000:19:00.0)", "node2 GPU 1 (...)" across nodes.
std::string gpu_label(const GpuHealth& gpu);

int preflight_exit_code(const PreflightResult& result);  // 0, 1, or 3
std::string preflight_text(const PreflightResult& result);
nlohmann::json preflight_json(const PreflightResult& result);
// One line for a launch: "preflight: 8 GPUs healthy in 3.2s (busbw 410.5 GB/s
// at 1 GiB)", or "... failed: <first failure>", or "... not checked: <why>".
std::string preflight_headline(const PreflightResult& result);
// What a launch makes of its preflight: nothing when healthy (print the
// headline), else the error that stops it before any rank starts: the
// headline, every failure, the report's path; exit 1 failed, 3 unavailable.
std::optional<Error> launch_refusal(const PreflightResult& result, const std::string& report_path);
// `--preflight-only`: the check is the whole launch. Thrown (not an
// sgpu::Error) where the ranks would start, with the result; the engine
// prints it as `sgpu doctor` does and exits with its code.
struct PreflightDone : std::exception {
  PreflightResult result;
  explicit PreflightDone(PreflightResult r) : result(std::move(r)) {}
  const char* what() const noexcept override { return "preflight only: the GPUs were checked, no rank started"; }
};

// "1 MiB", "8 B", "1 GiB".
std::string format_bytes(std::uint64_t bytes);

}  // namespace sgpu::launcher::preflight
