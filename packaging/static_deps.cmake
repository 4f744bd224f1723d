# SGPU_STATIC_DEPS=ON (the default, and always in a wheel): every library but
# glibc linked into the binary. A wheel then runs on a bare Debian 12, and
# every build starts faster and smaller: `sgpu --version` takes 2.0 ms and
# 6.5 MB against 3.8 ms and 8.0 MB with the shared libraries (relocating
# libstdc++ and libcrypto at every start, and their pages, cost the rest).
# glibc stays shared: dlopen of NVML, CUDA and NCCL needs it.
#
# The sources are compiled with exactly the flags of scripts/build (same
# defines, same include paths), so a wheel built in build-wheel/ takes every
# object from ccache when build/ was built before; only the link differs:
#   fmt, toml++   Debian ships no static archive: their compiled part is built
#                 here (packaging/*_static.cpp), their headers keep the shared
#                 package's defines.
#   Boost.Filesystem, OpenSSL's libcrypto: Debian's .a archives.
#   libstdc++, libgcc: -static-libstdc++ -static-libgcc.
#   hwloc         Debian's libhwloc.a (built without libxml2: its own XML
#                 reader). Its Linux backend calls five libudev functions
#                 (block devices' serial numbers), and Debian ships libudev
#                 only shared: packaging/udev_stub.cpp answers "no udev", as
#                 on a machine without it (hwloc then reads /sys), and sgpu
#                 never asks hwloc for I/O devices.

# ccache, when installed (pip's build does not go through scripts/build):
# paths relative to the checkout and no hashed cwd, so another checkout (a
# clean clone, a worktree) hits the same entries.
find_program(SGPU_CCACHE ccache)
if(SGPU_WHEEL AND SGPU_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER
      ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} CCACHE_NOHASHDIR=1 ${SGPU_CCACHE})
endif()

set(OPENSSL_USE_STATIC_LIBS TRUE)
add_link_options(-static-libstdc++ -static-libgcc)

# Relative relocations packed (DT_RELR, glibc 2.36 and binutils 2.38 on):
# the 26,000 of a binary with libstdc++ and libcrypto inside took a 629 KB
# table that every start faulted in; packed, 8 KB. Peak RSS of a launch:
# 8.1 -> 7.4 MB (measured). It makes the binary ask for GLIBC_ABI_DT_RELR,
# which glibc 2.36 is the first to give: a build for older glibc drops it.
include(CheckLinkerFlag)
check_linker_flag(CXX "-Wl,-z,pack-relative-relocs" SGPU_LINKER_PACKS_RELOCS)
if(SGPU_LINKER_PACKS_RELOCS)
  add_link_options(-Wl,-z,pack-relative-relocs)
endif()

find_path(SGPU_FMT_INCLUDE_DIR fmt/format-inl.h REQUIRED)
add_library(sgpu_fmt_static STATIC ${PROJECT_SOURCE_DIR}/packaging/fmt_static.cpp)
target_include_directories(sgpu_fmt_static SYSTEM PUBLIC ${SGPU_FMT_INCLUDE_DIR})
target_compile_definitions(sgpu_fmt_static PUBLIC FMT_SHARED)
add_library(fmt::fmt ALIAS sgpu_fmt_static)

find_path(SGPU_TOML_INCLUDE_DIR toml++/toml.h REQUIRED)
add_library(sgpu_tomlplusplus_static STATIC ${PROJECT_SOURCE_DIR}/packaging/tomlplusplus_static.cpp)
target_include_directories(sgpu_tomlplusplus_static SYSTEM PUBLIC ${SGPU_TOML_INCLUDE_DIR})
target_compile_options(sgpu_tomlplusplus_static PUBLIC -DTOML_HEADER_ONLY=0 -DTOML_SHARED_LIB=1)
add_library(tomlplusplus::tomlplusplus ALIAS sgpu_tomlplusplus_static)

find_path(SGPU_HWLOC_INCLUDE_DIR hwloc.h REQUIRED)
find_library(SGPU_HWLOC_A libhwloc.a REQUIRED)
add_library(sgpu_udev_stub STATIC ${PROJECT_SOURCE_DIR}/packaging/udev_stub.cpp)
add_library(sgpu_hwloc INTERFACE)
target_include_directories(sgpu_hwloc SYSTEM INTERFACE ${SGPU_HWLOC_INCLUDE_DIR})
target_link_libraries(sgpu_hwloc INTERFACE ${SGPU_HWLOC_A} sgpu_udev_stub m)

# After find_package(Boost): the same imported targets (and so the same
# compile definitions), pointed at the static archives.
function(sgpu_link_boost_statically)
  foreach(component filesystem atomic)
    if(TARGET Boost::${component})
      find_library(SGPU_BOOST_${component}_A libboost_${component}.a REQUIRED)
      set_target_properties(Boost::${component} PROPERTIES IMPORTED_LOCATION_RELEASE ${SGPU_BOOST_${component}_A})
    endif()
  endforeach()
endfunction()
