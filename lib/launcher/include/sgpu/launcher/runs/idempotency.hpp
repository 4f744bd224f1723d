#pragma once
// Named runs and `--idempotency-key`: finding the runs of a name or a key in
// the runs directory, what a launch with a key does with the newest run of
// it, whether that run did the same work, and the lock that makes "look for
// the key, then record it in a new run's state.json" one step for every sgpu
// process of the runs directory.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sgpu/launcher/runs/registry.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher {

// What a launch with a key does, given the state of the newest run with it
// (nullopt: none). Start: none, or it failed, timed out, was cancelled or
// lost. Follow: it is running. Reuse: it succeeded.
// Refuse: the newest run with the key cannot be read (its state.json is
// damaged), so whether it runs is unknown: nothing starts beside it.
enum class KeyAction { Start, Follow, Reuse, Refuse };
KeyAction key_action(std::optional<RunState> newest);

// The resources a launch asked for, as spec.json records them ("resources"):
// backend, nodes, gpus, gpus_per_node, nproc (a number or torchrun's word),
// gpu_type; null for what was not set.
nlohmann::ordered_json requested_resources(const JobSpec& spec);

// What makes two launches under one key the same work: the entrypoint
// (kind, target), its arguments and requested_resources(), in spec.json's
// shape ({"entrypoint": {kind, target, args}, "resources": {...}}).
nlohmann::ordered_json work_identity(const JobSpec& spec);

// How `recorded` (a run's spec.json) differs from `requested`
// (work_identity()), one item per field: "entrypoint: train.py before, eval.py now".
// Empty: the same work.
std::vector<std::string> work_differences(const nlohmann::json& recorded, const nlohmann::ordered_json& requested);

// The newest run whose state.json records this name / this key; nullopt when none.
std::optional<RunInfo> newest_run_named(const std::string& root, const std::string& name);
std::optional<RunInfo> newest_run_with_key(const std::string& root, const std::string& key);

// An exclusive flock on <root>/.keys/<hash of key>, as each run's lock is
// one (registry.hpp): held from the key's lookup until the new run's
// state.json records the key, so two launches with one key start one run.
// Blocks while another sgpu holds it, calling `before_waiting` first (to say
// why). Close-on-exec (no rank holds it); a fork shares it until both copies
// are closed. Throws sgpu::Error (1) when the file cannot be made or locked.
class KeyLock {
 public:
  KeyLock(const std::string& root, const std::string& key, const std::function<void()>& before_waiting = {});
  ~KeyLock();
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace sgpu::launcher
