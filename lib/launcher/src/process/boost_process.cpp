// Boost.Process v2 is compiled separately (BOOST_PROCESS_V2_SEPARATE_COMPILATION):
// this is the one translation unit that holds its implementation.
#include <boost/process/v2/src.hpp>
