// The portable build (packaging/portable/, scripts/build portable) compiles
// against glibc 2.28's headers and symbol versions. This header, included
// into every translation unit of that build (-include), declares the few
// glibc functions sgpu and Boost.Process call that came later; glibc_compat.cpp
// defines them in the binary itself, so it asks the system's glibc for none.
#pragma once

#include <features.h>

#if defined(__GLIBC__) && (__GLIBC__ == 2 && __GLIBC_MINOR__ < 34)
#ifdef __cplusplus
extern "C" {
#endif
// glibc 2.34: close_range(2), with the kernel's fallback made by hand on a
// kernel before 5.9 (the descriptors listed in /proc/self/fd closed one by one).
int close_range(unsigned int first, unsigned int last, int flags) __THROW;
#if __GLIBC_MINOR__ < 32
// glibc 2.32: "TERM" for SIGTERM, NULL for a number with no name.
const char* sigabbrev_np(int sig) __THROW;
#endif
#ifdef __cplusplus
}
#endif
#endif
