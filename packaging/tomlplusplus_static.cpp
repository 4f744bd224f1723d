// toml++'s compiled part, for a binary linked without libtomlplusplus.so (the
// wheel): Debian ships it as a shared library only, and its CMake package
// compiles users with TOML_HEADER_ONLY=0. This is the one translation unit
// that defines what those users call.
#define TOML_IMPLEMENTATION
#include <toml++/toml.h>
