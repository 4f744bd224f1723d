#pragma once
// What sgpu reads from a rank's files is any bytes the rank wrote. JSON nested
// thousands of levels deep would overflow the stack of the recursive code
// that copies, compares and prints a parsed document, and pretty-printing
// grows with depth squared; so documents nested deeper than this are not
// parsed at all. Pure.
#include <cstddef>
#include <string_view>

namespace sgpu::launcher {

// Deeper than any result or error file a program means to write.
inline constexpr std::size_t kMaxRankJsonDepth = 64;

// The deepest nesting of arrays and objects in `text` read as JSON (brackets
// inside strings do not count); 0 for a scalar. Stops counting at `limit` + 1.
std::size_t json_nesting_depth(std::string_view text, std::size_t limit = kMaxRankJsonDepth);

}  // namespace sgpu::launcher
