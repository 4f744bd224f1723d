// Boost.Process v2 is compiled separately (BOOST_PROCESS_V2_SEPARATE_COMPILATION):
// this is the one translation unit that holds its implementation.
// Its environment code names boost::remove_pointer unqualified, and gets it
// only through Boost.Filesystem's headers, which the portable build (with
// std::filesystem, BOOST_PROCESS_USE_STD_FS) does not include.
#include <boost/type_traits/remove_pointer.hpp>

#include <boost/process/v2/src.hpp>
