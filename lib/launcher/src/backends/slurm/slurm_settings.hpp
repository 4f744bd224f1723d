#pragma once
// [slurm]: the SLURM backend's settings, written by its schema rows
// (slurm_keys.cpp) into JobSpec::backend_settings and read by the backend alone.
#include <string>
#include <string_view>
#include <vector>

#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher::slurm {

struct Settings {
  static constexpr std::string_view kTable = "slurm";
  std::string partition;
  std::string account;
  std::string qos;
  std::string constraint;
  std::string reservation;
  std::string pool;  // "", "reserved", "on-demand"
  std::string reserved_partition;
  std::string reserved_qos;
  std::string on_demand_partition;
  std::string on_demand_qos;
  std::vector<std::string> extra_args;  // passed to salloc/srun as they are
};

inline const Settings& settings(const JobSpec& spec) { return spec.backend_settings.get<Settings>(); }

}  // namespace sgpu::launcher::slurm
