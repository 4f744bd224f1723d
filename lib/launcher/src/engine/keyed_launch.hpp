#pragma once
// `sgpu launch --idempotency-key K`, on the node that hosts the run (one
// node, or node 0 of many) and before anything starts: the newest run with
// the key answers for this launch when it is running or succeeded, and a
// new run starts otherwise (README "CI: retries that start nothing twice").
#include <optional>

#include "sgpu/launcher/backend.hpp"
#include "sgpu/launcher/runs/idempotency.hpp"

namespace sgpu::launcher {

// Takes the key's lock into `lock`, then looks for the newest run with the
// key. While it is held no other launch with the key looks: the caller
// releases it once the new run's state.json records the key (or when the
// launch fails). Returns sgpu's exit code when the run found answers: its
// id printed (--detach), followed to its end as `sgpu logs -f` does (running,
// attached), or its summary (succeeded). nullopt: a new run starts (no run
// with the key, the newest failed, or `force_new`). Throws sgpu::Error (2)
// when the run found ran other work (entrypoint, arguments, resources) and
// `force_new` is not set.
std::optional<int> answer_from_keyed_run(const LaunchContext& ctx, bool force_new, std::optional<KeyLock>& lock);

}  // namespace sgpu::launcher
