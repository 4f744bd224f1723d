// GPU inventories as JSON: what `sgpu devices -o json` prints, and what the
// SGPU_FAKE_GPUS test hook reads back, so a real node's inventory can be
// replayed on a machine without GPUs.
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/devices/devices.hpp"

namespace sgpu::launcher {

std::vector<env::Gpu> parse_inventory_json(std::string_view text, const std::string& source) {
  using nlohmann::json;
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    throw Error(
        fmt::format("{}: not valid JSON; expected a list like [{{\"name\": \"NVIDIA H100 80GB HBM3\"}}]", source));
  if (!doc.is_array()) throw Error(fmt::format("{}: expected a JSON list of GPUs", source));
  static const std::set<std::string> kFields = {"index",      "name",    "type",       "memory_bytes", "uuid",
                                                "pci_bus_id", "visible", "cuda_index", "numa_node"};
  std::vector<env::Gpu> gpus;
  std::set<int> indices;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const auto& item = doc[i];
    auto bad = [&](const std::string& why) {
      return Error(fmt::format("{}: GPU {} (item {}): {}", source, i, i + 1, why));
    };
    if (!item.is_object()) throw bad("expected an object with at least \"name\"");
    for (const auto& [k, v] : item.items())
      if (!kFields.contains(k))
        throw bad(
            fmt::format("unknown field \"{}\"; valid: index, name, type, memory_bytes, uuid, pci_bus_id, "
                        "numa_node (visible and cuda_index are recomputed from CUDA_VISIBLE_DEVICES)",
                        k));
    auto text_field = [&](const char* name, const std::string& fallback) {
      if (!item.contains(name)) return fallback;
      if (!item[name].is_string()) throw bad(fmt::format("\"{}\" must be a string", name));
      return item[name].get<std::string>();
    };
    env::Gpu g;
    g.name = text_field("name", "");
    if (g.name.empty()) throw bad("\"name\" is required, e.g. \"NVIDIA H100 80GB HBM3\"");
    g.index = static_cast<int>(i);
    if (item.contains("index")) {
      if (!item["index"].is_number_unsigned()) throw bad("\"index\" must be a number from 0");
      g.index = item["index"].get<int>();
    }
    if (!indices.insert(g.index).second) throw bad(fmt::format("index {} is listed twice", g.index));
    g.type = text_field("type", env::normalize_gpu_type(g.name));
    g.uuid = text_field("uuid", fmt::format("GPU-fake-{:04d}", g.index));
    g.pci_bus_id = normalize_pci_bus_id(text_field("pci_bus_id", fmt::format("00000000:{:02X}:00.0", 0x10 + g.index)));
    if (item.contains("memory_bytes")) {
      if (!item["memory_bytes"].is_number_unsigned()) throw bad("\"memory_bytes\" must be a number of bytes");
      g.memory_bytes = item["memory_bytes"].get<std::uint64_t>();
    }
    if (item.contains("numa_node")) {
      if (!item["numa_node"].is_number_unsigned()) throw bad("\"numa_node\" must be a number from 0");
      g.numa_node = item["numa_node"].get<int>();
    }
    gpus.push_back(std::move(g));
  }
  std::sort(gpus.begin(), gpus.end(), [](const env::Gpu& a, const env::Gpu& b) { return a.index < b.index; });
  return gpus;
}

std::string devices_json(const Discovery& d) {
  using nlohmann::json;
  json out = json::array();
  std::vector<std::pair<env::Gpu, int>> rows;
  int visible = 0;
  for (const auto& g : d.gpus) rows.emplace_back(g, g.visible ? visible++ : -1);
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first.index < b.first.index; });
  for (const auto& [g, cuda_index] : rows) {
    json row = {{"index", g.index},     {"name", g.name},
                {"type", g.type},       {"memory_bytes", g.memory_bytes},
                {"uuid", g.uuid},       {"pci_bus_id", g.pci_bus_id},
                {"visible", g.visible}, {"cuda_index", cuda_index < 0 ? json(nullptr) : json(cuda_index)}};
    if (g.numa_node >= 0) row["numa_node"] = g.numa_node;  // where NVML tells it (--cpu-bind)
    out.push_back(std::move(row));
  }
  return out.dump(2) + "\n";
}

}  // namespace sgpu::launcher
