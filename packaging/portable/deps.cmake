# SGPU_PORTABLE=ON (scripts/build portable): the release binary for any x86_64
# Linux with glibc 2.28 or newer. The compiler is zig's clang with target
# x86_64-linux-gnu.2.28 (`ziglang` from PyPI): glibc 2.28's headers and
# symbol versions, and LLVM's libc++ and compiler runtime linked in. Nothing
# under /usr/include may reach a compile: those are glibc 2.36's headers. So
# every dependency is an imported target made here, from one prefix that
# packaging/portable/deps builds:
#   include/{boost,fmt,toml++,CLI,nlohmann}  links to Debian's headers: the
#            header-only libraries, and fmt's and toml++'s compiled part
#            built here from their headers as in static_deps.cmake;
#   include/, lib/  OpenSSL (libssl, libcrypto) and hwloc, built from
#            Debian's sources by the same compiler.
# Boost.Process takes std::filesystem (BOOST_PROCESS_USE_STD_FS): no
# Boost.Filesystem to rebuild. Its headers then miss two includes, given
# here with -include; glibc_compat.h declares what glibc 2.28 lacks.
if(NOT SGPU_PORTABLE_PREFIX OR NOT EXISTS ${SGPU_PORTABLE_PREFIX}/lib/libcrypto.a)
  message(FATAL_ERROR "SGPU_PORTABLE needs SGPU_PORTABLE_PREFIX, the prefix packaging/portable/deps makes "
                      "(scripts/build portable sets both)")
endif()
set(inc ${SGPU_PORTABLE_PREFIX}/include)
# The CUDA headers only from the toolkit's own prefix, never /usr/include.
find_path(SGPU_CUDA_INCLUDE_DIR nccl.h PATHS /usr/local/cuda/include NO_DEFAULT_PATH)
set(compat ${PROJECT_SOURCE_DIR}/packaging/portable)

add_compile_options("SHELL:-include ${compat}/glibc_compat.h")
# A build id, as GNU ld gives one by default and zig's lld does not: the
# -dbgsym package, gdb and eu-stack find the debug info by it.
add_link_options(-Wl,--build-id=sha1)
# A position-independent executable, as Debian's gcc makes by default
# (lintian: hardening-no-pie); the archives below are built -fPIC.
add_compile_options(-fPIE)
add_link_options(-pie)
# .debug_aranges for every unit (clang writes none by default): elfutils
# (eu-addr2line, eu-stack) trusts the table when there is one, and OpenSSL's
# assembly brings one, which then hid every C++ unit from it.
add_compile_options(-gdwarf-aranges)
add_library(sgpu_glibc_compat STATIC ${compat}/glibc_compat.cpp)
link_libraries(sgpu_glibc_compat)

add_library(sgpu_portable_headers INTERFACE)
target_include_directories(sgpu_portable_headers SYSTEM INTERFACE ${inc})

add_library(sgpu_fmt_static STATIC ${PROJECT_SOURCE_DIR}/packaging/fmt_static.cpp)
target_link_libraries(sgpu_fmt_static PUBLIC sgpu_portable_headers)
target_compile_definitions(sgpu_fmt_static PUBLIC FMT_SHARED)
add_library(fmt::fmt ALIAS sgpu_fmt_static)

add_library(sgpu_tomlplusplus_static STATIC ${PROJECT_SOURCE_DIR}/packaging/tomlplusplus_static.cpp)
target_link_libraries(sgpu_tomlplusplus_static PUBLIC sgpu_portable_headers)
target_compile_options(sgpu_tomlplusplus_static PUBLIC -DTOML_HEADER_ONLY=0 -DTOML_SHARED_LIB=1)
add_library(tomlplusplus::tomlplusplus ALIAS sgpu_tomlplusplus_static)

foreach(name CLI11::CLI11 nlohmann_json::nlohmann_json Boost::headers)
  add_library(${name} INTERFACE IMPORTED)
  target_link_libraries(${name} INTERFACE sgpu_portable_headers)
endforeach()
add_library(Boost::filesystem INTERFACE IMPORTED)
target_link_libraries(Boost::filesystem INTERFACE Boost::headers)
target_compile_definitions(Boost::filesystem INTERFACE BOOST_PROCESS_USE_STD_FS)
target_compile_options(Boost::filesystem INTERFACE "SHELL:-include boost/optional.hpp" "SHELL:-include type_traits")

add_library(OpenSSL::Crypto STATIC IMPORTED)
set_target_properties(OpenSSL::Crypto PROPERTIES IMPORTED_LOCATION ${SGPU_PORTABLE_PREFIX}/lib/libcrypto.a)
target_link_libraries(OpenSSL::Crypto INTERFACE sgpu_portable_headers)
add_library(OpenSSL::SSL STATIC IMPORTED)
set_target_properties(OpenSSL::SSL PROPERTIES IMPORTED_LOCATION ${SGPU_PORTABLE_PREFIX}/lib/libssl.a)
target_link_libraries(OpenSSL::SSL INTERFACE OpenSSL::Crypto)

add_library(sgpu_hwloc STATIC IMPORTED)
set_target_properties(sgpu_hwloc PROPERTIES IMPORTED_LOCATION ${SGPU_PORTABLE_PREFIX}/lib/libhwloc.a)
target_link_libraries(sgpu_hwloc INTERFACE sgpu_portable_headers)  # its modff: glibc_compat.cpp

find_package(Threads REQUIRED)
