#pragma once
// What the fake driver libraries read from the environment (README "Test
// hooks"): how many GPUs, and which faults to inject where.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sgpu_fake {

// NAME's value, or when NAME_FILE is set, that file's first line, read at
// each call: a test changes a fault while sgpu runs (the health gate before
// a restart sees a GPU fail that was healthy at the start).
inline const char* env(const char* name) {
  static thread_local std::string from_file;
  std::string file_var = std::string(name) + "_FILE";
  if (const char* path = std::getenv(file_var.c_str()); path != nullptr) {
    from_file.clear();
    if (FILE* f = std::fopen(path, "r"); f != nullptr) {
      for (int c = std::fgetc(f); c != EOF && c != '\n'; c = std::fgetc(f)) from_file += static_cast<char>(c);
      std::fclose(f);
    }
    return from_file.empty() ? nullptr : from_file.c_str();
  }
  return std::getenv(name);
}

inline int gpu_count() {
  const char* n = env("SGPU_FAKE_DRIVER_GPUS");
  return n != nullptr ? std::atoi(n) : 0;
}

inline std::string gpu_name() {
  const char* n = env("SGPU_FAKE_DRIVER_NAME");
  return n != nullptr ? n : "NVIDIA H100 80GB HBM3";
}

// "1:3" -> 3 when asked for GPU (or rank) 1, else `otherwise`; "1" -> `present`.
inline long long keyed(const char* variable, int key, long long otherwise, long long present = 1) {
  const char* v = env(variable);
  if (v == nullptr || *v == '\0') return otherwise;
  std::string text(v);
  auto colon = text.find(':');
  if (std::atoi(text.substr(0, colon).c_str()) != key) return otherwise;
  return colon == std::string::npos ? present : std::atoll(text.c_str() + colon + 1);
}

// "0,0,1,1" -> 1 when asked for entry 2; -1 when unset or too short.
inline int nth_number(const char* variable, int n) {
  const char* v = env(variable);
  if (v == nullptr) return -1;
  std::string text(v);
  std::size_t at = 0;
  for (int i = 0; i < n; ++i) {
    at = text.find(',', at);
    if (at == std::string::npos) return -1;
    ++at;
  }
  if (at >= text.size() || text[at] < '0' || text[at] > '9') return -1;
  return std::atoi(text.c_str() + at);
}

inline std::string bus_id(int index) {
  char text[32];
  std::snprintf(text, sizeof text, "00000000:%02X:00.0", 0x18 + index);
  return text;
}

}  // namespace sgpu_fake
