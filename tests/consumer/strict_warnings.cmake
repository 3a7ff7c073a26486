# The warnings a strict user project compiles with, as errors: specdec's headers must not make a
# user's build warn. Included by the consumer projects next to this file.
#
#   specdec_consumer_strict_warnings(<target>)
#
# -O2: the uninitialized-use analysis GCC's warnings come from runs only when optimizing.
# Beyond -Wall -Wextra -Wpedantic, the warnings strict projects add (implicit conversions,
# shadowing, exact float comparison, old-style casts, ...).
include_guard(GLOBAL)

function(specdec_consumer_strict_warnings target)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    return()
  endif()
  target_compile_options(${target} PRIVATE -O2 -Wall -Wextra -Wpedantic -Werror
    -Wshadow -Wconversion -Wsign-conversion -Wfloat-equal -Wold-style-cast -Wdouble-promotion
    -Wcast-qual -Wundef -Wnon-virtual-dtor -Woverloaded-virtual -Wextra-semi
    -Wzero-as-null-pointer-constant -Wimplicit-fallthrough)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -Wcomma -Wshadow-all)
  endif()
endfunction()
