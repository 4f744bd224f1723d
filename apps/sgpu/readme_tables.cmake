# cmake -DREADME=... -DOUT=... -P readme_tables.cmake: the README's exit code
# table as a C++ header for the man page (sgpu manual), so the two cannot
# drift. Rewrites OUT only when its content changes.
file(STRINGS "${README}" lines ENCODING UTF-8)
set(in_section FALSE)
set(rows "")
foreach(line IN LISTS lines)
  if(line MATCHES "^### Exit codes")
    set(in_section TRUE)
  elseif(in_section AND line MATCHES "^#")
    break()
  elseif(in_section AND line MATCHES "^\\| " AND NOT line MATCHES "^\\| code \\|" AND NOT line MATCHES "^\\| ---")
    string(APPEND rows "${line}\n")
  endif()
endforeach()
if(rows STREQUAL "")
  message(FATAL_ERROR "${README}: no table under '### Exit codes'")
endif()
set(content "// Generated from README.md's \"### Exit codes\" table (apps/sgpu/readme_tables.cmake).\n#pragma once\n#include <string_view>\ninline constexpr std::string_view kReadmeExitCodes = R\"sgpu(${rows})sgpu\";\n")
file(CONFIGURE OUTPUT "${OUT}" CONTENT "${content}" @ONLY)  # written only when it changes
