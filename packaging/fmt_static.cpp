// fmt's compiled part, for a binary linked without libfmt.so (the wheel):
// Debian ships fmt as a shared library only. Without FMT_HEADER_ONLY,
// format-inl.h defines fmt's out-of-line functions here, once; the templates
// that format.h declares `extern` are instantiated below. Every other source
// is compiled exactly as in the shared build (FMT_SHARED only sets ELF
// visibility), so ccache hits across both builds.
#include <fmt/format-inl.h>

FMT_BEGIN_NAMESPACE
namespace detail {
template FMT_API auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
}  // namespace detail
FMT_END_NAMESPACE
