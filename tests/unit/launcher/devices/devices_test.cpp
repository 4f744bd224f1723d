#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/devices/devices.hpp"

using namespace sgpu::launcher;
using sgpu::env::Gpu;

TEST_CASE("launcher::normalize_pci_bus_id") {
  CHECK(normalize_pci_bus_id("0000:18:00.0") == "00000000:18:00.0");      // CUDA's form
  CHECK(normalize_pci_bus_id("00000000:9a:00.0") == "00000000:9A:00.0");  // NVML's form
  CHECK(normalize_pci_bus_id("0001:1b:00.0") == "00000001:1B:00.0");
  CHECK(normalize_pci_bus_id("").empty());
}

TEST_CASE("launcher::order_by_pci_bus numbers GPUs as CUDA_DEVICE_ORDER=PCI_BUS_ID does") {
  std::vector<Gpu> raw(3);
  raw[0].name = "NVIDIA H100 80GB HBM3";
  raw[0].pci_bus_id = "00000000:DB:00.0";
  raw[1].name = "NVIDIA H100 80GB HBM3";
  raw[1].pci_bus_id = "0000:1b:00.0";
  raw[2].name = "NVIDIA A100-SXM4-80GB";
  raw[2].pci_bus_id = "00000000:9A:00.0";
  auto gpus = order_by_pci_bus(raw);
  CHECK(gpus[0].pci_bus_id == "00000000:1B:00.0");
  CHECK(gpus[1].pci_bus_id == "00000000:9A:00.0");
  CHECK(gpus[2].pci_bus_id == "00000000:DB:00.0");
  for (int i = 0; i < 3; ++i) CHECK(gpus[static_cast<std::size_t>(i)].index == i);
  CHECK(gpus[0].type == "H100");
  CHECK(gpus[1].type == "A100");
}

TEST_CASE("launcher::parse_inventory_json") {
  auto gpus = parse_inventory_json(R"([
    {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984, "uuid": "GPU-aaaa", "pci_bus_id": "0000:18:00.0"},
    {"name": "NVIDIA L4", "visible": false, "cuda_index": null}
  ])",
                                   "inv.json");
  REQUIRE(gpus.size() == 2);
  CHECK(gpus[0].type == "H100");
  CHECK(gpus[0].memory_bytes == 85520809984ULL);
  CHECK(gpus[0].pci_bus_id == "00000000:18:00.0");
  CHECK(gpus[1].index == 1);
  CHECK(gpus[1].type == "L4");
  CHECK(gpus[1].uuid == "GPU-fake-0001");
  CHECK(gpus[1].visible);  // recomputed from CUDA_VISIBLE_DEVICES, not taken from the file
  CHECK(gpus[0].numa_node == -1);
  CHECK(parse_inventory_json(R"([{"name": "NVIDIA L4", "numa_node": 3}])", "inv.json")[0].numa_node == 3);

  struct Row {
    const char* json;
    const char* message;
  };
  const Row rows[] = {
      {"{", "inv.json: not valid JSON"},
      {"{}", "inv.json: expected a JSON list of GPUs"},
      {"[3]", "inv.json: GPU 0 (item 1): expected an object"},
      {"[{}]", "\"name\" is required"},
      {R"([{"name": "NVIDIA L4", "mem": 1}])", "unknown field \"mem\"; valid: index, name, type"},
      {R"([{"name": "NVIDIA L4", "index": 0}, {"name": "NVIDIA L4", "index": 0}])",
       "inv.json: GPU 1 (item 2): index 0 is listed twice"},
      {R"([{"name": 5}])", "\"name\" must be a string"},
      {R"([{"name": "NVIDIA L4", "memory_bytes": -1}])", "\"memory_bytes\" must be a number of bytes"},
      {R"([{"name": "NVIDIA L4", "numa_node": "1"}])", "\"numa_node\" must be a number from 0"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.json);
    CHECK_THROWS_WITH_AS(parse_inventory_json(row.json, "inv.json"), doctest::Contains(row.message), sgpu::Error);
  }
}

TEST_CASE("launcher::devices_json and devices_text") {
  Discovery none;
  none.source = "none";
  none.note = "no NVIDIA driver found (libnvidia-ml.so.1: cannot open shared object file)";
  CHECK(devices_json(none) == "[]\n");
  CHECK(devices_text(none) == "no GPUs: no NVIDIA driver found (libnvidia-ml.so.1: cannot open shared object file)\n");

  Discovery d;
  d.source = "nvml";
  d.note = "driver 550.54.15";
  d.gpus = sgpu::env::apply_cuda_visible_devices(sgpu::env::parse_fake_gpus("3xH100"), std::string("2,0"));
  auto doc = nlohmann::json::parse(devices_json(d));
  REQUIRE(doc.size() == 3);
  CHECK(doc[0]["index"] == 0);
  CHECK(doc[0]["cuda_index"] == 1);
  CHECK(doc[1]["visible"] == false);
  CHECK(doc[1]["cuda_index"].is_null());
  CHECK(doc[2]["cuda_index"] == 0);
  CHECK(doc[2]["type"] == "H100");
  CHECK_FALSE(doc[0].contains("numa_node"));  // only where NVML tells it
  auto with_node = d;
  for (auto& g : with_node.gpus) g.numa_node = g.index;
  CHECK(nlohmann::json::parse(devices_json(with_node))[1]["numa_node"] == 1);
  // What devices -o json prints, the test hook reads back.
  auto again = parse_inventory_json(devices_json(d), "devices.json");
  CHECK(again.size() == 3);
  CHECK(again[2].uuid == d.gpus.front().uuid);

  auto text = devices_text(d);
  CHECK(text.starts_with("3 GPUs (NVML, driver 550.54.15); CUDA_VISIBLE_DEVICES leaves 2 visible\n"));
  CHECK(text.find("yes, as cuda:1") != std::string::npos);
  CHECK(text.find("80.0 GiB") != std::string::npos);
}
