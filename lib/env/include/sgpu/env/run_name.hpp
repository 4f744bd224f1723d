#pragma once
// What a run name (`--name`) and an idempotency key (`--idempotency-key`)
// may hold. A name is also a way to say RUN (`sgpu status NAME`), so it can
// never be read as a run id: ids and their prefixes start with a digit (the
// year), a name with a letter, and "last" is taken. Pure: no I/O.
#include <cstddef>
#include <string>
#include <string_view>

namespace sgpu::env {

inline constexpr std::size_t kMaxRunNameLength = 64;
inline constexpr std::size_t kMaxIdempotencyKeyLength = 128;

// "" when `name` is a valid run name, else what is wrong and what is valid.
std::string run_name_problem(std::string_view name);

// "" when `key` is a valid idempotency key, else what is wrong and what is valid.
std::string idempotency_key_problem(std::string_view key);

// True when a RUN argument means a run name rather than an id, a prefix of
// one or "last": it starts with a letter and is not "last".
bool is_run_name_query(std::string_view query);

}  // namespace sgpu::env
