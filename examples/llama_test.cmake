# Smoke test of the specdec-llama CLI, run by ctest (see examples/CMakeLists.txt):
#
#   cmake -DCLI=<specdec-llama> -DEXPECTED_EXIT=<code> [-DEXPECTED_OUTPUT=<text>]
#         -P llama_test.cmake -- <arguments...>
#
# Exit 0: stdout must be the --json summary with the speculative figures, as many new tokens as
# asked for (-n), and, at --temp 0, speculative and plain outputs identical (with --parallel B:
# B sequences of -n tokens each, and every one identical). Otherwise: stderr must contain
# EXPECTED_OUTPUT.

set(cli_args)
set(after_separator FALSE)
math(EXPR last_arg "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last_arg})
  if(after_separator)
    list(APPEND cli_args "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(after_separator TRUE)
  endif()
endforeach()

execute_process(COMMAND ${CLI} ${cli_args} RESULT_VARIABLE exit_code OUTPUT_VARIABLE out
                ERROR_VARIABLE err TIMEOUT 300)
string(REPLACE ";" " " shown_args "${cli_args}")
if(NOT exit_code STREQUAL EXPECTED_EXIT)
  message(FATAL_ERROR "specdec-llama ${shown_args}: exit ${exit_code}, expected "
                      "${EXPECTED_EXIT}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(NOT EXPECTED_EXIT EQUAL 0)
  string(FIND "${err}" "${EXPECTED_OUTPUT}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "specdec-llama ${shown_args}: stderr lacks '${EXPECTED_OUTPUT}':\n${err}")
  endif()
  return()
endif()
# --parallel B: B sequences of -n tokens each, the batch's figures, and greedy outputs identical
# to plain batched decoding's.
if(cli_args MATCHES "--parallel;([0-9]+)")
  set(width ${CMAKE_MATCH_1})
  string(JSON count ERROR_VARIABLE json_error LENGTH "${out}" sequences)
  if(json_error OR NOT count EQUAL width)
    message(FATAL_ERROR "--json summary: ${count} sequences, expected ${width}\n${out}")
  endif()
  foreach(field tokens_per_second rows_per_target_call draft_length_histogram)
    string(JSON value ERROR_VARIABLE json_error GET "${out}" speculative ${field})
    if(json_error)
      message(FATAL_ERROR "--json summary: speculative.${field}: ${json_error}\n${out}")
    endif()
  endforeach()
  string(JSON value ERROR_VARIABLE json_error GET "${out}" plain tokens_per_second)
  if(json_error)
    message(FATAL_ERROR "--json summary: plain.tokens_per_second: ${json_error}\n${out}")
  endif()
  if(cli_args MATCHES "-n;([0-9]+)")
    math(EXPR last "${width} - 1")
    foreach(i RANGE ${last})
      string(JSON new_tokens GET "${out}" sequences ${i} new_tokens)
      if(NOT new_tokens EQUAL CMAKE_MATCH_1)
        message(FATAL_ERROR "sequence ${i}: ${new_tokens} new tokens, expected ${CMAKE_MATCH_1}"
                            "\n${out}")
      endif()
    endforeach()
  endif()
  string(JSON temperature GET "${out}" temperature)
  string(JSON identical GET "${out}" identical)
  if(temperature EQUAL 0 AND NOT identical STREQUAL "ON")
    message(FATAL_ERROR "greedy batched speculative and plain outputs differ\n${out}")
  endif()
  return()
endif()
foreach(field text new_tokens tokens_per_second rounds acceptance_rate tokens_per_round
              draft_seconds target_seconds library_seconds)
  string(JSON value ERROR_VARIABLE json_error GET "${out}" speculative ${field})
  if(json_error)
    message(FATAL_ERROR "--json summary: speculative.${field}: ${json_error}\n${out}")
  endif()
endforeach()
if(cli_args MATCHES "-n;([0-9]+)")
  string(JSON new_tokens GET "${out}" speculative new_tokens)
  if(NOT new_tokens EQUAL CMAKE_MATCH_1)
    message(FATAL_ERROR "${new_tokens} new tokens, expected ${CMAKE_MATCH_1}\n${out}")
  endif()
endif()
string(JSON temperature GET "${out}" temperature)
string(JSON identical ERROR_VARIABLE json_error GET "${out}" identical)
if(temperature EQUAL 0 AND NOT json_error AND NOT identical STREQUAL "ON")
  message(FATAL_ERROR "greedy speculative and plain outputs differ\n${out}")
endif()
