#pragma once
// "Did you mean ...?" for misspelt names: keys in a job spec, option values.
#include <string>
#include <string_view>
#include <vector>

namespace sgpu::env {

// Edits (insert, delete, substitute, swap two neighbours) that turn a into b,
// ignoring case and treating '-' and '_' alike: "gpu-type" is 0 from "gpu_type".
int edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word` when it is near enough to be a likely typo
// (at most a third of the word's length, at least 1 edit); "" otherwise.
std::string closest_match(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace sgpu::env
