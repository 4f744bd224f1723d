#include "sgpu/env/gpu.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::env {
namespace {

std::string upper(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

std::vector<std::string> tokens(std::string_view name) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      cur += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

bool is_memory_size(const std::string& t) {
  return t.size() > 2 && t.ends_with("GB") &&
         std::all_of(t.begin(), t.end() - 2, [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

}  // namespace

std::string normalize_gpu_type(std::string_view device_name) {
  auto toks = tokens(device_name);
  // Vendor and product-line words carry no type information.
  std::erase_if(toks, [](const std::string& t) {
    return t == "NVIDIA" || t == "TESLA" || t == "GEFORCE" || t == "QUADRO" || t == "SUPERCHIP";
  });
  if (toks.empty()) return "UNKNOWN";
  // Consumer and workstation families spell the model over several words:
  // "RTX 4090", "RTX A6000", "RTX 6000 Ada Generation", "RTX PRO 6000
  // Blackwell Server Edition", "GTX 1080 Ti", "TITAN RTX". Join them up to the
  // first word that describes a variant rather than the model.
  if (toks[0] == "RTX" || toks[0] == "GTX" || toks[0] == "TITAN") {
    std::string type = toks[0];
    for (std::size_t i = 1; i < toks.size(); ++i) {
      const auto& w = toks[i];
      if (is_memory_size(w) || w == "GENERATION" || w == "BLACKWELL" || w == "SERVER" || w == "EDITION" ||
          w == "WORKSTATION" || w == "LAPTOP" || w == "GPU" || w == "MAX" || w == "MOBILE")
        break;
      if (w != "SFF") type += w;
    }
    return type;
  }
  // Data-centre parts lead with the model: "H100 80GB HBM3", "A100-SXM4-40GB",
  // "GH200 480GB", "V100S-PCIE-32GB". A first word without a digit is no
  // model ("NVIDIA Graphics Device": a GPU newer than the driver's names).
  if (std::none_of(toks[0].begin(), toks[0].end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    return "UNKNOWN";
  return toks[0];
}

bool gpu_type_matches(std::string_view requested, const Gpu& gpu) {
  if (upper(requested) == upper(gpu.type)) return true;
  // "nvidia-h100-80gb", "RTX 4090", "NVIDIA H100 80GB HBM3": the same type by name.
  auto normalized = normalize_gpu_type(requested);
  return normalized != "UNKNOWN" && normalized == upper(gpu.type);
}

std::vector<Gpu> parse_fake_gpus(std::string_view spec) {
  std::vector<Gpu> gpus;
  std::string s(spec);
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part.empty()) continue;
    int count = 0;
    std::string type = "H100";
    auto x = part.find_first_of("xX");
    std::string num = x == std::string::npos ? part : part.substr(0, x);
    if (x != std::string::npos) type = part.substr(x + 1);
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), count);
    if (ec != std::errc() || p != num.data() + num.size() || count <= 0 || count > 1024 || type.empty())
      throw Error(fmt::format("SGPU_FAKE_GPUS: invalid entry '{}'; valid forms: 8xH100, 2xA100,2xH100, 4", part));
    for (int i = 0; i < count; ++i) {
      Gpu g;
      g.index = static_cast<int>(gpus.size());
      g.name = "NVIDIA " + type + " (fake)";
      g.type = normalize_gpu_type(g.name);
      g.memory_bytes = 80ULL << 30;
      g.uuid = fmt::format("GPU-fake-{:04d}", g.index);
      g.pci_bus_id = fmt::format("00000000:{:02X}:00.0", 0x10 + g.index);
      gpus.push_back(g);
    }
  }
  return gpus;
}

std::vector<Gpu> apply_cuda_visible_devices(std::vector<Gpu> inventory, const std::optional<std::string>& cvd) {
  if (!cvd) return inventory;
  for (auto& g : inventory) g.visible = false;
  std::vector<Gpu> ordered;
  std::stringstream ss(*cvd);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(std::remove_if(item.begin(), item.end(), [](unsigned char c) { return std::isspace(c); }), item.end());
    Gpu* found = nullptr;
    int idx = -1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), idx);
    if (!item.empty() && ec == std::errc() && p == item.data() + item.size()) {
      for (auto& g : inventory)
        if (g.index == idx) found = &g;
    } else if (item.starts_with("GPU-")) {
      for (auto& g : inventory)
        if (g.uuid.starts_with(item)) found = &g;
    }
    if (found == nullptr || found->visible) break;  // CUDA stops at the first invalid entry
    found->visible = true;
    ordered.push_back(*found);
  }
  for (const auto& g : inventory)
    if (!g.visible) ordered.push_back(g);
  return ordered;
}

std::string describe_inventory(const std::vector<Gpu>& gpus) {
  if (gpus.empty()) return "no GPUs";
  std::vector<std::pair<std::string, int>> counts;
  for (const auto& g : gpus) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](auto& c) { return c.first == g.type; });
    if (it == counts.end())
      counts.emplace_back(g.type, 1);
    else
      ++it->second;
  }
  std::string out;
  for (const auto& [type, n] : counts) out += fmt::format("{}{}x {}", out.empty() ? "" : ", ", n, type);
  return out;
}

std::vector<Gpu> select_gpus(const std::vector<Gpu>& inventory, int count, std::string_view type,
                             std::string_view count_where, std::string_view type_where) {
  std::string count_subject = count_where.empty() ? fmt::format("--gpus {}", count) : std::string(count_where);
  std::string type_subject = type_where.empty() ? fmt::format("--gpu-type {}", type) : std::string(type_where);
  std::vector<Gpu> visible;
  for (const auto& g : inventory)
    if (g.visible) visible.push_back(g);
  if (visible.empty())
    throw Error(fmt::format("{}: this node has no visible GPUs{}; use --nproc N for CPU ranks", count_subject,
                            inventory.empty() ? "" : " (CUDA_VISIBLE_DEVICES hides them all)"));
  std::vector<Gpu> matching;
  if (type.empty()) {
    // Any type, but one type for the whole job: the first visible GPU's.
    for (const auto& g : visible)
      if (g.type == visible.front().type) matching.push_back(g);
  } else {
    for (const auto& g : visible)
      if (gpu_type_matches(type, g)) matching.push_back(g);
  }
  if (matching.empty())
    throw Error(fmt::format("{}: this node has {}; pick one of those types or omit the GPU type", type_subject,
                            describe_inventory(visible)));
  if (static_cast<int>(matching.size()) < count)
    throw Error(fmt::format("{}: this node has only {} visible {} GPU{} ({})", count_subject, matching.size(),
                            matching.front().type, matching.size() == 1 ? "" : "s", describe_inventory(visible)));
  matching.resize(static_cast<std::size_t>(count));
  return matching;
}

}  // namespace sgpu::env
