#include "sgpu/launcher/devices/devices.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace {

bool names_a_file(std::string_view spec) { return spec.find('/') != std::string_view::npos || spec.ends_with(".json"); }

std::vector<env::Gpu> read_fake_inventory(const std::string& spec) {
  if (!names_a_file(spec)) return env::parse_fake_gpus(spec);
  std::ifstream in(spec, std::ios::binary);
  if (!in) throw Error(fmt::format("SGPU_FAKE_GPUS={}: cannot read the inventory file", spec));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_inventory_json(text.str(), "SGPU_FAKE_GPUS=" + spec);
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : std::string(sep)) + p;
  return out;
}

}  // namespace

std::string normalize_pci_bus_id(std::string_view bus_id) {
  std::string id(bus_id);
  for (auto& c : id) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto colon = id.find(':');
  // The domain is 4 hex digits from CUDA, 8 from NVML; compare them as NVML writes them.
  if (colon < 8 && id.find(':', colon + 1) != std::string::npos) id.insert(0, 8 - colon, '0');
  return id;
}

std::vector<env::Gpu> order_by_pci_bus(std::vector<env::Gpu> gpus) {
  for (auto& g : gpus) g.pci_bus_id = normalize_pci_bus_id(g.pci_bus_id);
  std::stable_sort(gpus.begin(), gpus.end(),
                   [](const env::Gpu& a, const env::Gpu& b) { return a.pci_bus_id < b.pci_bus_id; });
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    gpus[i].index = static_cast<int>(i);
    gpus[i].type = env::normalize_gpu_type(gpus[i].name);
  }
  return gpus;
}

Discovery discover_gpus(const env::Environment& environment) {
  Discovery d;
  std::optional<std::string> cvd;
  if (auto it = environment.find("CUDA_VISIBLE_DEVICES"); it != environment.end()) cvd = it->second;
  if (auto it = environment.find("SGPU_FAKE_GPUS"); it != environment.end()) {
    d.source = "fake";
    d.note = "SGPU_FAKE_GPUS is set: a test hook stands in for the driver";
    d.gpus = env::apply_cuda_visible_devices(read_fake_inventory(it->second), cvd);
    return d;
  }
  auto report = query_nvml();
  d.source = "nvml";
  if (!report.ok) {
    auto cuda = query_cuda_driver();
    if (cuda.ok) {
      d.source = "cuda";
      report = std::move(cuda);
    } else {
      d.source = "none";
      d.note = fmt::format("no NVIDIA driver found ({}; {})", report.error, cuda.error);
      return d;
    }
  }
  d.note = report.version.empty() ? "" : "driver " + report.version;
  if (!report.skipped.empty()) d.note += (d.note.empty() ? "" : "; ") + join(report.skipped, "; ");
  d.gpus = env::apply_cuda_visible_devices(order_by_pci_bus(std::move(report.gpus)), cvd);
  return d;
}

std::string devices_text(const Discovery& d) {
  if (d.gpus.empty()) {
    if (d.source == "none") return fmt::format("no GPUs: {}\n", d.note);
    return fmt::format("no GPUs: {} reports none{}\n", d.source == "cuda" ? "the CUDA driver" : d.source,
                       d.note.empty() ? "" : " (" + d.note + ")");
  }
  auto gpus = d.gpus;
  std::vector<int> cuda_index(gpus.size(), -1);
  int visible = 0;
  for (std::size_t i = 0; i < gpus.size(); ++i)
    if (gpus[i].visible) cuda_index[i] = visible++;
  bool all_visible = visible == static_cast<int>(gpus.size());
  bool renumbered = !all_visible;
  for (std::size_t i = 0; i < gpus.size(); ++i)
    renumbered = renumbered || (gpus[i].visible && cuda_index[i] != gpus[i].index);
  std::vector<std::size_t> order(gpus.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return gpus[a].index < gpus[b].index; });

  std::size_t name_w = 4, type_w = 4, uuid_w = 4;
  for (const auto& g : gpus) {
    name_w = std::max(name_w, g.name.size());
    type_w = std::max(type_w, g.type.size());
    uuid_w = std::max(uuid_w, g.uuid.size());
  }
  std::string source = d.source == "nvml"   ? "NVML"
                       : d.source == "cuda" ? "CUDA driver API"
                                            : "SGPU_FAKE_GPUS, a test hook";
  bool show_note = !d.note.empty() && d.source != "fake";
  std::string out = fmt::format("{} GPU{} ({}{}){}\n", gpus.size(), gpus.size() == 1 ? "" : "s", source,
                                show_note ? ", " + d.note : "",
                                all_visible ? "" : fmt::format("; CUDA_VISIBLE_DEVICES leaves {} visible", visible));
  out += fmt::format("{:<6} {:<{}} {:<{}} {:>10} {:<{}} {:<16} {}\n", "index", "type", type_w, "name", name_w, "memory",
                     "uuid", uuid_w, "pci bus id", "visible");
  for (auto i : order) {
    const auto& g = gpus[i];
    std::string vis = !g.visible ? "no" : !renumbered ? "yes" : fmt::format("yes, as cuda:{}", cuda_index[i]);
    out += fmt::format("{:<6} {:<{}} {:<{}} {:>6.1f} GiB {:<{}} {:<16} {}\n", g.index, g.type, type_w, g.name, name_w,
                       static_cast<double>(g.memory_bytes) / (1ULL << 30), g.uuid, uuid_w, g.pci_bus_id, vis);
  }
  return out;
}

}  // namespace sgpu::launcher
