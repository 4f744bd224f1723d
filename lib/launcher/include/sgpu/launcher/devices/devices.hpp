#pragma once
// This node's GPUs. Discovery goes through NVML (libnvidia-ml.so.1), else the
// CUDA driver API (libcuda.so.1), both loaded with dlopen so one binary runs
// with or without a driver. Indices are CUDA's in PCI bus order, which is the
// order ranks see: sgpu starts them with CUDA_DEVICE_ORDER=PCI_BUS_ID.
//
// Test hook: SGPU_FAKE_GPUS stands in for the driver, as "8xH100" /
// "2xA100,2xH100" or as the path of a JSON inventory in the shape
// `sgpu devices -o json` prints (README "Test hooks").
#include <string>
#include <string_view>
#include <vector>

#include "sgpu/env/gpu.hpp"
#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

struct Discovery {
  std::vector<env::Gpu> gpus;  // all GPUs, `visible` marked per CUDA_VISIBLE_DEVICES, visible first
  std::string source;          // "nvml", "cuda", "fake", "none"
  std::string note;            // the driver version, or why the list is empty
};

Discovery discover_gpus(const env::Environment& environment);

// What one driver library reported, unordered (nvml.cpp, cuda_driver.cpp).
struct DriverReport {
  bool ok = false;
  std::vector<env::Gpu> gpus;        // name, memory, UUID, PCI bus id; index and type unset
  std::string version;               // "550.54.15" when the library says
  std::string error;                 // why not ok: "libnvidia-ml.so.1: cannot open shared object file"
  std::vector<std::string> skipped;  // devices that could not be read, with why
};
DriverReport query_nvml();
DriverReport query_cuda_driver();

// Sorts by PCI bus id (NVML's own order is not stable across reboots), then
// numbers the GPUs from 0 and fills `type` from the name. Pure.
std::vector<env::Gpu> order_by_pci_bus(std::vector<env::Gpu> gpus);

// "0000:18:00.0" (CUDA) or "00000000:18:00.0" (NVML) -> "00000000:18:00.0".
std::string normalize_pci_bus_id(std::string_view bus_id);

// A JSON inventory for the test hook: [{"name": "NVIDIA H100 80GB HBM3",
// "memory_bytes": ..., "uuid": ..., "pci_bus_id": ..., "index": 0, "type":
// "H100"}, ...]; only "name" is required. `visible` and `cuda_index` are
// accepted and recomputed from CUDA_VISIBLE_DEVICES. Throws sgpu::Error
// naming `source` and the entry.
std::vector<env::Gpu> parse_inventory_json(std::string_view text, const std::string& source);

// `sgpu devices` output: a table (or one line when there are no GPUs), and
// JSON (`[]` when there are none), each GPU in index order.
std::string devices_text(const Discovery& discovery);
std::string devices_json(const Discovery& discovery);

}  // namespace sgpu::launcher
