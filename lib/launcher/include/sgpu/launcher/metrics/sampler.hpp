#pragma once
// One node's sampler (--sample-every): on a timer of the node's event loop,
// each running rank's CPU, memory, threads and state from /proc, its step
// from its heartbeat file, and the job's GPUs through NVML, handed on as one
// NodeSample. The launcher's observers keep and show them (outputs/); an
// agent sends them to the launcher.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/env/duration.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/process/samples.hpp"
#include "sgpu/launcher/process/supervisor.hpp"

namespace sgpu::launcher::metrics {

struct SampledGpu {
  int index = 0;
  std::string pci_bus_id;  // how NVML finds it; "" by index
  std::string uuid;
  std::vector<int> ranks;  // the ranks meant to use it
};

// The plan's GPUs with the ranks that use each.
std::vector<SampledGpu> sampled_gpus(const LaunchPlan& plan);

struct SamplerOptions {
  env::Seconds every{10};
  int node = 0;
  std::string host;
  std::vector<SampledGpu> gpus;
};

class GpuSampler;

class Sampler {
 public:
  Sampler(boost::asio::io_context& io, SamplerOptions options, std::function<std::vector<RunningRank>()> ranks,
          std::function<void(const NodeSample&)> emit);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // The first sample one period from now, then one per period.
  void start();
  // No sample after this; the loop is not held.
  void stop();
  // One sample now (also what each tick emits).
  NodeSample sample();

 private:
  void arm();
  struct Previous {
    std::uint64_t ticks = 0;
    std::chrono::steady_clock::time_point at{};
  };
  struct Stepped {
    int pid = 0;
    std::int64_t step = 0;
    std::chrono::steady_clock::time_point at{};
  };
  boost::asio::steady_timer timer_;
  SamplerOptions options_;
  std::function<std::vector<RunningRank>()> ranks_;
  std::function<void(const NodeSample&)> emit_;
  std::unique_ptr<GpuSampler> gpus_;
  std::map<int, Previous> cpu_;   // by pid
  std::map<int, Stepped> steps_;  // by rank
  std::chrono::steady_clock::time_point next_{};
  bool running_ = false;
};

}  // namespace sgpu::launcher::metrics
