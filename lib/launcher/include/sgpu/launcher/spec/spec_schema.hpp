#pragma once
// The job spec's schema: one row per key (`resources.gpus`, `job.python`...)
// saying its type, range, flag, SGPU_* variable and where it lands in
// JobSpec. A TOML file, the environment, the command line and --set all
// produce Settings through this one table, so they accept the same values and
// say the same things about bad ones. Pure: no I/O.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher {

enum class ValueKind {
  String,
  Int,
  Bool,
  StringList,  // TOML array of strings; on the command line "a,b" or ["a", "b"]
  Duration,    // "90m", "2h30m", "none", or a number of seconds
  Choice,      // one of KeyInfo::choices
  RankCount,   // a number, or one of KeyInfo::choices (torchrun's gpu/auto/cpu)
  NodeCount,   // a number, or torchrun's "N:N"
  StringMap,   // [env]: NAME = "value" for any NAME
};

using Value = std::variant<bool, std::int64_t, std::string, std::vector<std::string>>;

// Where a value came from, in increasing precedence.
struct Origin {
  enum class Kind { File, Environment, Flag, Set };
  Kind kind = Kind::Flag;
  std::string name;  // the file, the variable, the flag ("--gpus"), "--set"
  int line = 0;      // File only
  int column = 0;
};

struct Setting {
  std::string key;  // "resources.gpus", "env.NCCL_DEBUG"
  Value value;
  std::string text;  // as the user wrote it, for messages
  Origin origin;

  // "job.toml:4:8: resources.gpus = 0", "--gpus 0", "--set resources.gpus=0",
  // "SGPU_PYTHON=/x": how an error message about this value starts.
  std::string where() const;
  // The same without the value: "job.toml:4:8: resources.gpus", "--gpus".
  std::string subject() const;
  // For a sentence naming two settings: "resources.gpus (job.toml:4:8)", "--gpus".
  std::string label() const;
};

struct KeyInfo {
  std::string_view path = {};  // "resources.gpus"; "env" for the StringMap
  ValueKind kind = ValueKind::String;
  std::string_view flags = {};  // CLI11 names, "--gpus" or "-o,--output"; "" for none
  std::string_view env = {};    // "SGPU_PYTHON"; "" for none
  std::string_view help = {};   // one line: --help and error messages
  std::int64_t min = 0;         // Int/NodeCount/RankCount range, when max > min
  std::int64_t max = 0;
  std::vector<std::string_view> choices = {};  // Choice, RankCount words
  bool none_ok = true;                         // Duration: "none" allowed
  std::string_view flag_value = "true";        // Bool: what giving the flag means ("false" for --no-mlflow)
  void (*apply)(JobSpec&, const Setting&) = nullptr;
  std::string_view backend = {};  // the backend whose table this is ("ssh"); "" for sgpu's own keys
};

// The whole schema, in the order --help and error messages list it: sgpu's
// own keys, then each backend's table in the order the backends registered.
const std::vector<KeyInfo>& spec_keys();

// A backend joins the schema: its flag name becomes a valid --backend, and
// its table's rows (which may be none) are marked as its own, so settings
// for another backend are noted. The backend registry calls it for every
// backend it lists (backends/registry.cpp); before a spec that uses them is
// read. Pointers from find_key() do not outlive it.
void add_backend_keys(std::string_view backend, std::vector<KeyInfo> keys);

// sgpu's own keys: [job], [resources], [env], [timeouts], [output], [rendezvous].
std::vector<KeyInfo> core_spec_keys();

// The row for "resources.gpus", or for "env.NAME" the [env] row; nullptr
// when there is no such key.
const KeyInfo* find_key(std::string_view path);

// True when `path` names a table of the schema ("ssh", "slurm.pools").
bool is_spec_table(std::string_view path);

// "unknown key 'resources.gpu'; did you mean 'resources.gpus'? Valid keys in
// [resources]: ...". `path` is the full dotted key (or table) as written.
std::string unknown_key_message(std::string_view path, bool is_table = false);

// What a key accepts, for messages: "an integer from 1 to 65536".
std::string describe_kind(const KeyInfo& key);

// Turns text from a flag, an SGPU_* variable or a --set (after TOML syntax was
// handled) into a Setting of `key`: "8" for an integer, "a,b" for a list.
// Returns an error message, starting with where the text came from, when the
// text does not fit the key's type.
std::variant<Setting, std::string> setting_from_text(const KeyInfo& key, std::string key_path, std::string text,
                                                     Origin origin);

// Range, choice and duration checks shared by every source; "" when fine.
std::string check_setting(const KeyInfo& key, const Setting& setting);

// Accessors for apply functions; the kind was checked when the Setting was made.
std::int64_t as_int(const Setting& s);
const std::string& as_string(const Setting& s);
bool as_bool(const Setting& s);
const std::vector<std::string>& as_list(const Setting& s);

}  // namespace sgpu::launcher
