#pragma once
// Lists of ranks as users write them (--ranks 0,3 / 0-3,7). Pure.
#include <string_view>
#include <vector>

namespace sgpu::env {

// Ranks named by `text`: "0,3", "0-3,7". Throws sgpu::Error naming `what`
// (the flag or key it came from) and the valid forms.
std::vector<int> parse_rank_list(std::string_view text, std::string_view what);

}  // namespace sgpu::env
