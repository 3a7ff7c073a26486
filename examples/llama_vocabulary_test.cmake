# The padded draft through specdec-llama with no flag, run by ctest (see examples/CMakeLists.txt):
#
#   cmake -DCLI=<specdec-llama> -DGGUF_DIR=<dir> -P llama_vocabulary_test.cmake
#
# Greedy, target kjv-target-f16.gguf, twice: with the padded draft (kjv-draft-padded-f16.gguf,
# 32 unused tokens more) and with the shipped one. The padded run must print the path it chose,
# "draft vocabulary: padded (32 extra draft ids, all unused): mapped draft", before decoding;
# both must report their output identical to the target's plain greedy output (specdec-llama
# compares the two token lists and exits 1 otherwise); and the two generated texts must be the
# same. The vocabulary is byte level (one token per byte), so the same text is the same tokens.

set(prompt "\nPsalms 23:1 ")
set(common -m ${GGUF_DIR}/kjv-target-f16.gguf -p "${prompt}" -n 96)

function(generate draft out_text out_stdout)
  execute_process(COMMAND ${CLI} ${common} -md ${GGUF_DIR}/${draft}
                  RESULT_VARIABLE exit_code OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 300)
  if(NOT exit_code EQUAL 0)
    message(FATAL_ERROR "specdec-llama -md ${draft}: exit ${exit_code}\n${out}\n${err}")
  endif()
  if(NOT out MATCHES "greedy outputs identical: yes")
    message(FATAL_ERROR "-md ${draft}: speculative and plain greedy outputs differ\n${out}")
  endif()
  # The generated text: after the prompt, up to the summary.
  string(FIND "${out}" "${prompt}" begin)
  string(FIND "${out}" "\n\nspeculative (" end)
  if(begin EQUAL -1 OR end EQUAL -1)
    message(FATAL_ERROR "-md ${draft}: cannot find the generated text in\n${out}")
  endif()
  string(LENGTH "${prompt}" prompt_length)
  math(EXPR begin "${begin} + ${prompt_length}")
  math(EXPR length "${end} - ${begin}")
  string(SUBSTRING "${out}" ${begin} ${length} text)
  set(${out_text} "${text}" PARENT_SCOPE)
  set(${out_stdout} "${out}" PARENT_SCOPE)
endfunction()

generate(kjv-draft-padded-f16.gguf padded_text padded_out)
set(expected_line "draft vocabulary: padded (32 extra draft ids, all unused): mapped draft\n")
string(FIND "${padded_out}" "${expected_line}" found)
if(NOT found EQUAL 0)
  message(FATAL_ERROR "the padded pair's first line is not '${expected_line}':\n${padded_out}")
endif()
generate(kjv-draft-f16.gguf shipped_text shipped_out)
if(NOT shipped_out MATCHES "^draft vocabulary: identical \\(256 tokens\\): the draft as it is\n")
  message(FATAL_ERROR "the shipped pair's first line names another path:\n${shipped_out}")
endif()
if(NOT padded_text STREQUAL shipped_text)
  message(FATAL_ERROR "padded and shipped drafts give different greedy outputs:\n"
                      "padded:  '${padded_text}'\nshipped: '${shipped_text}'")
endif()
string(LENGTH "${padded_text}" length)
if(length LESS 96)
  message(FATAL_ERROR "${length} bytes of generated text, expected 96: '${padded_text}'")
endif()
message(STATUS "padded and shipped drafts: the same ${length} bytes: ${padded_text}")
