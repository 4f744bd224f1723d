#pragma once
// GPUs as sgpu reasons about them: a node's inventory, type names, and which
// GPUs a job gets. Discovery (NVML, CUDA, the SGPU_FAKE_GPUS hook) lives in
// lib/launcher; everything here is pure.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sgpu::env {

struct Gpu {
  int index = 0;     // CUDA index in PCI bus order
  std::string name;  // "NVIDIA H100 80GB HBM3"
  std::string type;  // normalised: "H100"
  std::uint64_t memory_bytes = 0;
  std::string uuid;             // "GPU-8e3f..."
  std::string pci_bus_id;       // "00000000:18:00.0"
  bool visible = true;          // left visible by CUDA_VISIBLE_DEVICES
  int numa_node = -1;           // the NUMA node nearest it (NVML's memory affinity); -1: unknown
  std::vector<int> local_cpus;  // the CPUs nearest it (NVML's CPU affinity), when no NUMA node is known
  bool operator==(const Gpu&) const = default;
};

// "NVIDIA H100 80GB HBM3" -> "H100", "Tesla V100-SXM2-16GB" -> "V100",
// "NVIDIA GeForce RTX 4090" -> "RTX4090", "NVIDIA A10G" -> "A10G".
std::string normalize_gpu_type(std::string_view device_name);

// Case-insensitive match of a requested type ("h100", "H100") against a GPU;
// a full device name ("NVIDIA H100 80GB HBM3") matches by its normalised type.
bool gpu_type_matches(std::string_view requested, const Gpu& gpu);

// The test hook's short form: "8xH100", "2xA100,2xH100", "4" (4 x H100). A
// JSON inventory file is read in lib/launcher (devices.hpp).
std::vector<Gpu> parse_fake_gpus(std::string_view spec);

// Marks `visible` per CUDA_VISIBLE_DEVICES (indices or UUIDs/prefixes; an
// invalid entry hides it and everything after, as CUDA does). Returns the
// GPUs in the order CUDA_VISIBLE_DEVICES lists them.
std::vector<Gpu> apply_cuda_visible_devices(std::vector<Gpu> inventory,
                                            const std::optional<std::string>& cuda_visible_devices);

// "8x H100, 2x A100" for messages.
std::string describe_inventory(const std::vector<Gpu>& gpus);

// Picks `count` visible GPUs of `type` (any type when empty; then all chosen
// GPUs must share a type). Throws sgpu::Error naming what the node has; the
// message starts with `count_where` or `type_where` (how the user asked, e.g.
// "job.toml:4:8: resources.gpus = 8"), by default "--gpus N"/"--gpu-type T".
std::vector<Gpu> select_gpus(const std::vector<Gpu>& inventory, int count, std::string_view type,
                             std::string_view count_where = {}, std::string_view type_where = {});

}  // namespace sgpu::env
