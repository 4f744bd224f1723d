// The [slurm] table of the job spec: the slurm backend's rows of the schema
// (spec_schema.hpp), added to the schema by the backend registry.
#include "backends/slurm/slurm_keys.hpp"

#include "backends/slurm/slurm_settings.hpp"

namespace sgpu::launcher::slurm {
namespace {
using K = ValueKind;
using S = Setting;

Settings& edit(JobSpec& spec) { return spec.backend_settings.edit<Settings>(); }
}  // namespace

std::vector<KeyInfo> spec_keys() {
  return {
      {.path = "slurm.partition",
       .flags = "--partition",
       .help = "SLURM partition for a new allocation (--backend slurm)",
       .apply = [](JobSpec& s, const S& v) { edit(s).partition = as_string(v); }},
      {.path = "slurm.account",
       .flags = "--account",
       .help = "SLURM account for a new allocation",
       .apply = [](JobSpec& s, const S& v) { edit(s).account = as_string(v); }},
      {.path = "slurm.qos",
       .flags = "--qos",
       .help = "SLURM QoS for a new allocation",
       .apply = [](JobSpec& s, const S& v) { edit(s).qos = as_string(v); }},
      {.path = "slurm.constraint",
       .flags = "--constraint",
       .help = "SLURM node features for a new allocation, e.g. h100&ib",
       .apply = [](JobSpec& s, const S& v) { edit(s).constraint = as_string(v); }},
      {.path = "slurm.reservation",
       .flags = "--reservation",
       .help = "SLURM reservation for a new allocation",
       .apply = [](JobSpec& s, const S& v) { edit(s).reservation = as_string(v); }},
      {.path = "slurm.pool",
       .kind = K::Choice,
       .flags = "--pool",
       .env = "SGPU_POOL",
       .help = "GPU pool: reserved or on-demand, the partition/QoS that [slurm.pools] names for it",
       .choices = {"reserved", "on-demand"},
       .apply = [](JobSpec& s, const S& v) { edit(s).pool = as_string(v); }},
      {.path = "slurm.pools.reserved.partition",
       .apply = [](JobSpec& s, const S& v) { edit(s).reserved_partition = as_string(v); }},
      {.path = "slurm.pools.reserved.qos",
       .apply = [](JobSpec& s, const S& v) { edit(s).reserved_qos = as_string(v); }},
      {.path = "slurm.pools.on_demand.partition",
       .apply = [](JobSpec& s, const S& v) { edit(s).on_demand_partition = as_string(v); }},
      {.path = "slurm.pools.on_demand.qos",
       .apply = [](JobSpec& s, const S& v) { edit(s).on_demand_qos = as_string(v); }},
      {.path = "slurm.extra_args",
       .kind = K::StringList,
       .flags = "--slurm-arg",
       .help = "more arguments for salloc when sgpu asks for an allocation, each passed as given "
               "(flag: repeat it, one argument per use: --slurm-arg=--exclusive)",
       .apply = [](JobSpec& s, const S& v) { edit(s).extra_args = as_list(v); }},
  };
}

}  // namespace sgpu::launcher::slurm
