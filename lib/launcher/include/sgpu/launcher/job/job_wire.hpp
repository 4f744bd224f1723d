#pragma once
// The job as the launcher sends it to `sgpu agent` processes (the Welcome
// message's opaque "job" field): the JobSpec and the launcher's working
// directory, as JSON. A field an older agent does not know is ignored; a
// missing one keeps its default.
#include <optional>
#include <string>
#include <string_view>

#include "sgpu/launcher/process/samples.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher {

struct JobDescription {
  JobSpec spec;
  std::string cwd;  // where ranks start on every node
  // What the launcher added to every rank's environment (the launch's MLflow
  // run): in spec.env too, and sent apart for the nodes of a static launch,
  // which run their own spec.
  env::Environment added_env;
  // The scheduler's end of the allocation (UNIX seconds) when the launcher
  // knows it: with the launcher's --timeout, each node's SGPU_DEADLINE.
  std::optional<long long> end_by{};
};

std::string encode_job(const JobDescription& job);

// Throws sgpu::Error when the text is not a job description.
JobDescription decode_job(std::string_view text);

// A node's sample as its agent sends it (the rendezvous's NodeSamples);
// decode_samples gives nullopt for text that is not one (an agent's bug: the
// launcher drops it, the job goes on).
std::string encode_samples(const NodeSample& sample);
std::optional<NodeSample> decode_samples(std::string_view text);

}  // namespace sgpu::launcher
