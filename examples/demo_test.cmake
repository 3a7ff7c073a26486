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
#         and a greedy run must report identical speculative and plain outputs. With --batch B:
#         the batch summary, B sequences each with its full budget of tokens, several
#         sequences' rows per target call, and (greedy) identical batched speculative and plain
#         outputs. An EXPECTED_OUTPUT must be in the summary (a plain substring).
# Otherwise: stderr must be one line containing EXPECTED_OUTPUT (a plain substring).

# The summary `out`'s draft-length histogram sums to its rounds, and a greedy run's speculative
# and plain outputs are identical (`what`: "batched " or "").
function(check_histogram_and_greedy out what)
  string(JSON lengths LENGTH "${out}" draft_length_histogram)
  set(histogram_rounds 0)
  math(EXPR last_length "${lengths} - 1")
  foreach(n RANGE ${last_length})
    string(JSON count GET "${out}" draft_length_histogram ${n})
    math(EXPR histogram_rounds "${histogram_rounds} + ${count}")
  endforeach()
  string(JSON rounds GET "${out}" speculative rounds)
  if(NOT histogram_rounds EQUAL rounds)
    message(FATAL_ERROR "draft_length_histogram sums to ${histogram_rounds}, rounds = "
                        "${rounds}\n${out}")
  endif()
  string(JSON temperature GET "${out}" sampling temperature)
  if(temperature EQUAL 0)
    string(JSON identical GET "${out}" identical)
    if(NOT identical)
      message(FATAL_ERROR "greedy ${what}speculative and plain outputs differ\n${out}")
    endif()
  endif()
endfunction()

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
    else()  # n_head: the u32 at offset 24; 4 divides the draft's d_model 96
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

if(EXPECTED_EXIT EQUAL 0 AND demo_args MATCHES "(^|;)--batch;([0-9]+)")
  set(batch ${CMAKE_MATCH_2})
  string(JSON batch_field ERROR_VARIABLE json_error GET "${out}" batch)
  if(json_error OR NOT batch_field EQUAL batch)
    message(FATAL_ERROR "--json summary: batch: '${batch_field}', expected ${batch} ${json_error}"
                        "\n${out}")
  endif()
  string(JSON budget GET "${out}" max_new_tokens)
  string(JSON sequences LENGTH "${out}" sequences)
  if(NOT sequences EQUAL batch)
    message(FATAL_ERROR "--json summary: ${sequences} sequences, expected ${batch}\n${out}")
  endif()
  math(EXPR last_sequence "${batch} - 1")
  set(total_tokens 0)
  foreach(i RANGE ${last_sequence})
    foreach(field prompt seed text tokens_per_second acceptance_rate)
      string(JSON value ERROR_VARIABLE json_error GET "${out}" sequences ${i} ${field})
      if(json_error)
        message(FATAL_ERROR "--json summary: sequences[${i}].${field}: ${json_error}\n${out}")
      endif()
    endforeach()
    string(JSON new_tokens GET "${out}" sequences ${i} new_tokens)
    if(NOT new_tokens EQUAL budget)
      message(FATAL_ERROR "sequence ${i}: ${new_tokens} new tokens, expected ${budget}\n${out}")
    endif()
    math(EXPR total_tokens "${total_tokens} + ${new_tokens}")
  endforeach()
  foreach(field new_tokens tokens_per_second rounds acceptance_rate target_calls
                rows_per_target_call draft_calls rows_per_draft_call ms_per_token_per_sequence)
    string(JSON value ERROR_VARIABLE json_error GET "${out}" speculative ${field})
    if(json_error)
      message(FATAL_ERROR "--json summary: speculative.${field}: ${json_error}\n${out}")
    endif()
  endforeach()
  # Per-sequence latency, both runs: a time per token every sequence waited.
  foreach(run speculative plain)
    string(JSON latency GET "${out}" ${run} ms_per_token_per_sequence)
    if(NOT latency GREATER 0)
      message(FATAL_ERROR "${run}.ms_per_token_per_sequence = ${latency}, expected > 0\n${out}")
    endif()
  endforeach()
  string(JSON new_tokens GET "${out}" speculative new_tokens)
  if(NOT new_tokens EQUAL total_tokens)
    message(FATAL_ERROR "speculative.new_tokens ${new_tokens}, the sequences' sum ${total_tokens}")
  endif()
  # More than one sequence's rows in a target call: the sequences share the calls.
  string(JSON rows_per_call GET "${out}" speculative rows_per_target_call)
  string(JSON plain_rows_per_call GET "${out}" plain rows_per_target_call)
  if(batch GREATER 1 AND NOT plain_rows_per_call GREATER 1)
    message(FATAL_ERROR "plain batched decoding scored ${plain_rows_per_call} rows per target "
                        "call for ${batch} sequences\n${out}")
  endif()
  # The histogram of every sequence's rounds sums to the rounds.
  check_histogram_and_greedy("${out}" "batched ")
  string(JSON speedup GET "${out}" measured_speedup)
  message(STATUS "ok: exit 0, batch of ${batch}, ${rows_per_call} rows per target call, "
                 "measured speedup ${speedup}")
elseif(EXPECTED_EXIT EQUAL 0)
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
  # The draft-length policy that ran, and its histogram: one entry per length 0..K, summing to
  # the rounds.
  string(JSON policy ERROR_VARIABLE json_error GET "${out}" draft_policy)
  if(json_error OR NOT policy MATCHES "^(fixed|schedule|confidence|goodput)$")
    message(FATAL_ERROR "--json summary: draft_policy: '${policy}' ${json_error}\n${out}")
  endif()
  if(demo_args MATCHES "-k;auto" AND NOT policy STREQUAL "goodput")
    message(FATAL_ERROR "-k auto ran the ${policy} policy\n${out}")
  endif()
  # The threads each model ran on: --threads / --threads-draft, 1 without them.
  foreach(model_flag target:--threads draft:--threads-draft)
    string(REPLACE ":" ";" model_flag "${model_flag}")
    list(GET model_flag 0 model)
    list(GET model_flag 1 flag)
    set(expected_threads 1)
    if(demo_args MATCHES "(^|;)${flag};([0-9]+)")
      set(expected_threads ${CMAKE_MATCH_2})
    endif()
    string(JSON threads ERROR_VARIABLE json_error GET "${out}" threads ${model})
    if(json_error OR NOT threads EQUAL expected_threads)
      message(FATAL_ERROR "--json summary: threads.${model}: '${threads}', expected "
                          "${expected_threads} ${json_error}\n${out}")
    endif()
  endforeach()
  string(JSON proposer ERROR_VARIABLE json_error GET "${out}" proposer)
  if(json_error OR NOT proposer MATCHES "^(model|ngram|both)$")
    message(FATAL_ERROR "--json summary: proposer: '${proposer}' ${json_error}\n${out}")
  endif()
  if(demo_args MATCHES "--proposer;([a-z]+)" AND NOT proposer STREQUAL CMAKE_MATCH_1)
    message(FATAL_ERROR "--proposer ${CMAKE_MATCH_1} ran the ${proposer} proposer\n${out}")
  endif()
  # One entry per usable length min(K, max_new_tokens - 1) plus one for plain rounds (K may be
  # larger than CMake's 64-bit math: then the budget bounds it).
  string(JSON draft_length GET "${out}" draft_length)
  string(JSON lengths LENGTH "${out}" draft_length_histogram)
  string(LENGTH "${draft_length}" draft_length_digits)
  if(draft_length_digits GREATER 15 OR draft_length GREATER_EQUAL budget)
    set(expected_lengths ${budget})
  else()
    math(EXPR expected_lengths "${draft_length} + 1")
  endif()
  if(NOT lengths EQUAL expected_lengths)
    message(FATAL_ERROR "draft_length_histogram has ${lengths} entries, expected "
                        "${expected_lengths}\n${out}")
  endif()
  check_histogram_and_greedy("${out}" "")
  string(JSON speedup GET "${out}" measured_speedup)
  if(NOT "${EXPECTED_OUTPUT}" STREQUAL "")
    string(FIND "${out}" "${EXPECTED_OUTPUT}" found)
    if(found EQUAL -1)
      message(FATAL_ERROR "specdec-demo ${shown_args}: the --json summary lacks "
                          "'${EXPECTED_OUTPUT}'\n${out}")
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
