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

}  // namespace

std::string normalize_gpu_type(std::string_view device_name) {
  auto toks = tokens(device_name);
  // Drop vendor and family words that carry no type information.
  std::erase_if(toks, [](const std::string& t) {
    return t == "NVIDIA" || t == "TESLA" || t == "GEFORCE" || t == "QUADRO" || t == "SUPERCHIP";
  });
  if (toks.empty()) return "UNKNOWN";
  // "RTX 4090", "RTX A6000", "RTX 6000 Ada": join RTX with its model.
  if (toks[0] == "RTX" && toks.size() >= 2) {
    std::string t = "RTX" + toks[1];
    if (toks.size() >= 3 && toks[2] == "ADA") t += "ADA";
    return t;
  }
  // "GH200 480GB", "GB200 NVL", "H100 80GB HBM3", "A100-SXM4-40GB", "L40S".
  return toks[0];
}

bool gpu_type_matches(std::string_view requested, const Gpu& gpu) { return upper(requested) == upper(gpu.type); }

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

std::vector<Gpu> select_gpus(const std::vector<Gpu>& inventory, int count, std::string_view type) {
  std::vector<Gpu> visible;
  for (const auto& g : inventory)
    if (g.visible) visible.push_back(g);
  if (visible.empty())
    throw Error(fmt::format("--gpus {}: this node has no visible GPUs{}; use --nproc N for CPU ranks", count,
                            inventory.empty() ? "" : " (CUDA_VISIBLE_DEVICES hides them all)"));
  std::vector<Gpu> matching;
  std::string chosen_type(type);
  if (chosen_type.empty()) chosen_type = visible.front().type;
  for (const auto& g : visible)
    if (upper(g.type) == upper(chosen_type)) matching.push_back(g);
  if (matching.empty())
    throw Error(fmt::format("--gpu-type {}: this node has {}; pick one of those types or omit --gpu-type", type,
                            describe_inventory(visible)));
  if (static_cast<int>(matching.size()) < count)
    throw Error(fmt::format("--gpus {}: this node has only {} visible {} GPU{} ({})", count, matching.size(),
                            matching.front().type, matching.size() == 1 ? "" : "s", describe_inventory(visible)));
  matching.resize(static_cast<std::size_t>(count));
  return matching;
}

}  // namespace sgpu::env
