# Smoke test of the specdec-demo CLI, run by ctest (see examples/CMakeLists.txt):
#
#   cmake -DDEMO=<specdec-demo> -DEXPECTED_EXIT=<code> [-DEXPECTED_OUTPUT=<text>]
#         -P demo_test.cmake -- <demo arguments...>
#
#   cmake ... -DCORRUPT=<flip|n_head|truncate> -DCORRUPT_SOURCE=<.spdc> -DCORRUPT_COPY=<path> ...
#         first writes a damaged copy of CORRUPT_SOURCE to CORRUPT_COPY (with dd; the arguments
#         then name CORRUPT_COPY): one payload byte changed, the n_head field set to another
#         divisor of d_model (4), or the file cut to 100 kB.
#
# Runs the demo with the arguments after "--" and fails unless it exits with EXPECTED_EXIT.
# Exit 0: stdout must be the --json summary (parsed here) with the fields the README documents,
#         and a greedy run must report identical speculative and plain outputs.
# Otherwise: stderr must be one line containing EXPECTED_OUTPUT (a plain substring).

set(demo_args)
set(after_separator FALSE)
math(EXPR last_arg "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last_arg})
  if(after_separator)
    list(APPEND demo_args "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(after_separator TRUE)
  endif()
endforeach()

if(CORRUPT)
  find_program(DD dd REQUIRED)
  file(SIZE "${CORRUPT_SOURCE}" source_size)
  if(CORRUPT STREQUAL "truncate")
    execute_process(COMMAND ${DD} if=${CORRUPT_SOURCE} of=${CORRUPT_COPY} bs=1000 count=100
                    RESULT_VARIABLE dd_exit ERROR_QUIET)
  else()
    file(COPY_FILE "${CORRUPT_SOURCE}" "${CORRUPT_COPY}")
    if(CORRUPT STREQUAL "flip")
      math(EXPR offset "${source_size} / 2")
      file(READ "${CORRUPT_SOURCE}" old_byte OFFSET ${offset} LIMIT 1 HEX)
      set(new_byte "A")  # 0x41, unless that is the byte already there
      if(old_byte STREQUAL "41")
        set(new_byte "B")
      endif()
    else()  # n_head: the u32 at offset 24; 4 divides the draft's d_model 64
      set(offset 24)
      set(new_byte "\\004")  # octal, for sh's printf
    endif()
    execute_process(COMMAND sh -c "printf '${new_byte}' | ${DD} of='${CORRUPT_COPY}' bs=1 seek=${offset} conv=notrunc"
                    RESULT_VARIABLE dd_exit ERROR_QUIET)
  endif()
  if(NOT dd_exit EQUAL 0)
    message(FATAL_ERROR "could not write the corrupted copy ${CORRUPT_COPY}")
  endif()
endif()

execute_process(COMMAND ${DEMO} ${demo_args}
                RESULT_VARIABLE exit_code OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 300)
string(REPLACE ";" " " shown_args "${demo_args}")
if(NOT exit_code STREQUAL EXPECTED_EXIT)
  message(FATAL_ERROR "specdec-demo ${shown_args}: exit ${exit_code}, expected ${EXPECTED_EXIT}\n"
                      "stdout:\n${out}\nstderr:\n${err}")
endif()

if(EXPECTED_EXIT EQUAL 0)
  foreach(field text new_tokens tokens_per_second acceptance_rate alpha_hat tokens_per_round
                cost_ratio predicted_speedup)
    string(JSON value ERROR_VARIABLE json_error GET "${out}" speculative ${field})
    if(json_error)
      message(FATAL_ERROR "--json summary: speculative.${field}: ${json_error}\n${out}")
    endif()
  endforeach()
  string(JSON new_tokens GET "${out}" speculative new_tokens)
  string(JSON budget GET "${out}" max_new_tokens)
  if(NOT new_tokens EQUAL budget)
    message(FATAL_ERROR "--json summary: ${new_tokens} new tokens, expected ${budget}\n${out}")
  endif()
  string(JSON verifier ERROR_VARIABLE json_error GET "${out}" verifier)
  if(json_error OR NOT verifier MATCHES "^(token|block)$")
    message(FATAL_ERROR "--json summary: verifier: '${verifier}' ${json_error}\n${out}")
  endif()
  if(demo_args MATCHES "--verifier;block" AND NOT verifier STREQUAL "block")
    message(FATAL_ERROR "--verifier block ran the ${verifier} verifier\n${out}")
  endif()
  string(JSON speedup GET "${out}" measured_speedup)
  string(JSON temperature GET "${out}" sampling temperature)
  if(temperature EQUAL 0)
    string(JSON identical GET "${out}" identical)
    if(NOT identical)
      message(FATAL_ERROR "greedy speculative and plain outputs differ\n${out}")
    endif()
  endif()
  message(STATUS "ok: exit 0, measured speedup ${speedup}")
else()
  string(FIND "${err}" "${EXPECTED_OUTPUT}" found)
  string(STRIP "${err}" stripped)
  if(found EQUAL -1 OR stripped MATCHES "\n")
    message(FATAL_ERROR "specdec-demo ${shown_args}: expected one stderr line containing "
                        "'${EXPECTED_OUTPUT}', got:\n${err}")
  endif()
  message(STATUS "ok: exit ${exit_code}: ${stripped}")
endif()
