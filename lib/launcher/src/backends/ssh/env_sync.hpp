#pragma once
// --sync-env: the job's Python environment replicated on every node, offline.
//
// On the launcher node, the job's interpreter describes itself (a lock): its
// Python, platform, and every distribution its virtual environment holds,
// each with a key (the hash of its installed RECORD, or of an editable
// package's source tree). Each distribution becomes a wheel in the
// launcher's wheel cache (~/.cache/sgpu/wheels/<key>/) once: rebuilt from
// the installed files themselves, so no package index is needed anywhere,
// or, for an editable package, built from its source with pip. The packages
// it sees from outside the environment (--system-site-packages) are the
// system packages every node must have alike.
//
// Each node is asked (one ssh command) what it has: its python3.X, its
// platform and system packages, the wheels of its cache, and whether the
// environment of this lock's hash is there already. A node that cannot run
// the environment is an error naming it before anything starts; a node that
// lacks the environment gets the wheels it lacks (and uv), and builds it
// under ~/.cache/sgpu/envs/<hash>/ with uv, offline, once: a lock file makes
// a second launch wait for the first's build and use it.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/process/command.hpp"

namespace sgpu::launcher::ssh {

struct EnvPackage {
  std::string name;     // normalised ("my-pkg")
  std::string version;  // as installed
  std::string key;      // 16 hex digits: what identifies its files
  std::string wheel;    // "<key>/<file>.whl" under the wheel cache; "" when not built (a dry run)
  bool editable = false;
  std::string source;  // an editable package's directory
  std::uint64_t bytes = 0;
};

struct EnvLock {
  std::string interpreter;  // the job's, as given
  std::string version;      // "3.11.7"
  std::string minor;        // "3.11": the node runs python3.11
  std::string implementation;
  std::string platform;                       // sysconfig.get_platform(): "linux-x86_64"
  bool system_site = false;                   // include-system-site-packages
  std::vector<EnvPackage> packages;           // the environment's own, by name
  std::map<std::string, std::string> system;  // what it sees outside itself: name -> version
  std::vector<std::string> skipped;           // installed files a wheel cannot carry (outside site-packages)
  std::string hash;                           // lock_hash(): 16 hex digits
  std::string uv;                             // the uv binary shipped to nodes; "" none found (pip builds there)
};

// The inspection's JSON (env_inspect_script's output). Throws sgpu::Error with
// the inspection's own message, or naming the interpreter when it is not JSON.
EnvLock parse_env_lock(const std::string& json, const std::string& interpreter);
// What identifies the environment a node builds: Python, platform, whether
// it sees the system's packages, and every package's name, version and key.
std::string lock_text(const EnvLock& lock);
std::string lock_hash(const EnvLock& lock);

// The last non-empty line of a command's output, trailing blanks cut.
std::string last_line(const std::string& text);

// One node's answer to env_probe_command.
struct NodeProbe {
  std::string home;            // the remote $HOME
  std::string python;          // its python3.X ("" none on the PATH)
  std::string other_python;    // when there is none: what `python3 --version` said ("" nothing)
  std::string implementation;  // "cpython"
  std::string platform;        // "linux-x86_64"
  std::map<std::string, std::string> system;
  std::vector<std::string> keys;   // the wheel keys its cache holds
  std::vector<std::string> ready;  // the hashes of the environments built there
  std::vector<std::string> bins;   // ~/.cache/sgpu/bin's files (shipped uv binaries)
  // Once the lock is known (settle_probe): this lock's environment is built
  // there; this launch's uv is there.
  bool env_ready = false;
  bool has_uv = false;
};

// The probe's output, or a one-line reason why it is not one.
std::optional<NodeProbe> parse_node_probe(const std::string& text, std::string& why);

// Sets env_ready and has_uv for `lock`: the node was asked before the lock
// was made (both at once).
void settle_probe(const EnvLock& lock, NodeProbe& probe);

// Why `node` cannot run the environment (another Python, platform, a system
// package missing or of another version), or "" when it can. Pure.
std::string judge_node(const EnvLock& lock, const NodeProbe& probe, const std::string& node);

// What one node gets: the wheels it lacks, and uv when it has none.
struct NodeShipment {
  std::vector<const EnvPackage*> wheels;
  bool uv = false;
  std::uint64_t bytes = 0;
};
NodeShipment shipment_for(const EnvLock& lock, const NodeProbe& probe, std::uint64_t uv_bytes);

// The remote name of the uv binary this launch ships, "bin/uv-<size>-<mtime>"
// under ~/.cache/sgpu; "" without uv.
std::string uv_remote_name(const EnvLock& lock);

// The ssh command's remote script that prints a NodeProbe's JSON on stdout:
// what python<minor> ("3.11") has, and what ~/.cache/sgpu holds.
std::string env_probe_command(const std::string& minor);
// The Python minor version of `interpreter` without running it: its venv's
// pyvenv.cfg, else the name it resolves to (python3.11); "" unknown.
std::string interpreter_minor(const std::string& interpreter);
// The remote script that unpacks a tar from stdin into ~/.cache/sgpu and
// builds the environment of `lock.hash` unless it is there (holding its lock
// file while it does); prints "sgpu-env: built" or "sgpu-env: found".
std::string env_build_command(const EnvLock& lock);
// Run before a node's agent (the bootstrap's prelude): marks the environment
// used now and holds a shared lock on that mark while the agent runs, so
// --envs prune never removes an environment a job is using.
std::string env_use_prelude(const EnvLock& lock);

// --envs list|prune: one host's cached environments.
struct CachedEnv {
  std::string hash;
  long long built = 0;  // seconds since the epoch
  long long used = 0;   // the last launch that used it (its build when none did)
  long long kib = 0;
  int packages = 0;
  bool in_use = false;  // a job's agent holds it now
  bool removed = false;
};
struct NodeEnvs {
  std::string home;
  std::vector<CachedEnv> envs;
  long long wheels_kib = 0;  // the wheel cache, after a prune
  int wheels_removed = 0;
  long long wheels_removed_kib = 0;
};
// The remote script: lists (and with `prune`, removes what no launch used for
// `unused_for_s` and is not in use, then the wheels no environment left needs).
std::string env_maintenance_command(bool prune, long long unused_for_s);
std::optional<NodeEnvs> parse_env_listing(const std::string& text, std::string& why);

// The node's interpreter of the environment, under its $HOME.
std::string env_python(const EnvLock& lock, const std::string& home);

// The launcher's wheel cache: $XDG_CACHE_HOME/sgpu/wheels or ~/.cache/sgpu/wheels.
std::string wheel_cache_dir(const env::Environment& environment);

// The Python program that describes (and with "1", builds the wheels of) the
// interpreter it runs in: argv[1] the wheel cache, argv[2] "1" or "0".
const char* env_inspect_script();

// --- impure: processes ---

// The command that runs the job's interpreter with env_inspect_script;
// `build` makes the missing wheels.
std::vector<std::string> inspect_argv(const std::string& interpreter, const env::Environment& environment, bool build);
// Its result as a lock, with the uv to ship. Throws sgpu::Error naming the
// interpreter.
EnvLock read_inspection(const CommandResult& result, const std::string& interpreter,
                        const env::Environment& environment);

}  // namespace sgpu::launcher::ssh
