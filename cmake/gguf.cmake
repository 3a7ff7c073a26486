# GGUF files for llama.cpp, generated at build time by tools/spdc_to_gguf.py (never committed).
#
#   include(cmake/gguf.cmake)        # after find_package(llama CONFIG)
#   specdec_add_gguf_models(specdec_gguf_models OUTPUT_DIR ${PROJECT_BINARY_DIR}/models)
#
# specdec_add_gguf_models(<target> OUTPUT_DIR <dir>) defines
#   <target>      (built by default) the shipped pair, models/kjv-{target,draft}.spdc, as
#                 <dir>/kjv-{target,draft}-{f16,f32}.gguf, and the tiny random pair
#                 <dir>/tiny-{target,draft}.gguf: 16 byte tokens, one layer, d_model 32, 2 heads,
#                 d_ff 64, 128 positions, f32, seeds 1 (target) and 2 (draft) -- different
#                 weights, so a draft is accepted only in part; small enough that sampling tests
#                 through llama.cpp run in seconds. Two vocabulary variants, for the mapped-draft
#                 path (docs/guide/vocabularies.md): <dir>/kjv-draft-padded-f16.gguf, the
#                 shipped draft with 32 unused tokens <|pad_0|>.. appended (zero rows; 288
#                 tokens against the target's 256: near-identical, as padded families are), and
#                 <dir>/tiny-disjoint.gguf, the tiny draft with its tokens written "<0xBB>" (no
#                 token text in common with the others: a pair that must be refused), and
#                 <dir>/kjv-bpe-draft-f16.gguf, the BPE draft (models/kjv-bpe-draft.spdc) with
#                 its GPT-2 BPE vocabulary (models/kjv-bpe.tokenizer): another tokenizer, which
#                 specdec-llama drafts by text. About a second each.
#   <target>_quantized (built on request: cmake --build build --target <target>_quantized) the
#                 shipped pair quantized by gguf-py, <dir>/kjv-{target,draft}-{q8_0,q4_0}.gguf
#                 (what CPU users of llama.cpp run; bench/llama_cpp_compare.py --weights q8_0).
#                 Not in the default build: nothing in the tests needs them.
#   <target>_1b   (built on request: cmake --build build --target <target>_1b) a random-weight
#                 GPT-2 of 1.0B parameters, <dir>/gpt2-1b-f16.gguf: 256 byte tokens, 20 layers,
#                 d_model 2048, 16 heads, d_ff 8192, 2048 positions; 2.0 GB, 20-40 s to write.
# Outputs are rebuilt when the script or a .spdc file changes. Linking a test to <target> is
# `add_dependencies(<test> <target>)`.
#
# Cache variables:
#   SPECDEC_GGUF_PYTHON  the interpreter (default /usr/bin/python3: the system one, with Debian's
#                        python3-numpy and python3-yaml, whatever `python3` is first on PATH)
#   SPECDEC_GGUF_PY      llama.cpp's gguf-py directory (default: share/llama.cpp/gguf-py of the
#                        prefix llama was found in, where scripts/install-llama-cpp.sh puts it)
# Configuration fails with a message saying what is missing if that interpreter cannot import
# gguf-py from there.
include_guard(GLOBAL)

get_filename_component(_specdec_gguf_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

set(SPECDEC_GGUF_PYTHON "/usr/bin/python3" CACHE FILEPATH
    "Python (with NumPy and PyYAML) that runs tools/spdc_to_gguf.py")
# llama's package config is in <prefix>/lib/cmake/llama or <prefix>/lib/<multiarch>/cmake/llama.
find_path(SPECDEC_GGUF_PY NAMES gguf/__init__.py
          PATHS "${llama_DIR}/../../../share/llama.cpp/gguf-py"
                "${llama_DIR}/../../../../share/llama.cpp/gguf-py"
          NO_DEFAULT_PATH
          DOC "llama.cpp's gguf-py directory (the one holding gguf/__init__.py)")

function(specdec_add_gguf_models target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "OUTPUT_DIR" "")
  if(NOT ARG_OUTPUT_DIR)
    message(FATAL_ERROR "specdec_add_gguf_models(${target}): OUTPUT_DIR is required")
  endif()
  if(NOT SPECDEC_GGUF_PY)
    message(FATAL_ERROR
      "specdec: llama.cpp's gguf-py not found next to llama (llama_DIR = ${llama_DIR}); set "
      "SPECDEC_GGUF_PY to the gguf-py directory of llama.cpp's source tree")
  endif()
  execute_process(
    COMMAND "${SPECDEC_GGUF_PYTHON}" -c
            "import sys; sys.path.insert(0, sys.argv[1]); import gguf" "${SPECDEC_GGUF_PY}"
    RESULT_VARIABLE import_result ERROR_VARIABLE import_error OUTPUT_QUIET)
  if(NOT import_result EQUAL 0)
    message(FATAL_ERROR
      "specdec: ${SPECDEC_GGUF_PYTHON} cannot import llama.cpp's gguf-py from "
      "${SPECDEC_GGUF_PY} (SPECDEC_GGUF_PYTHON, SPECDEC_GGUF_PY; Debian: apt-get install "
      "python3-numpy python3-yaml):\n${import_error}")
  endif()

  set(script "${_specdec_gguf_root}/tools/spdc_to_gguf.py")
  set(run "${SPECDEC_GGUF_PYTHON}" "${script}")
  set(common --gguf-py "${SPECDEC_GGUF_PY}")
  set(outputs "")
  foreach(model IN ITEMS kjv-target kjv-draft)
    set(spdc "${_specdec_gguf_root}/models/${model}.spdc")
    foreach(type IN ITEMS f16 f32)
      set(gguf "${ARG_OUTPUT_DIR}/${model}-${type}.gguf")
      add_custom_command(OUTPUT "${gguf}"
        COMMAND ${run} convert ${common} --outtype ${type} "${spdc}" "${gguf}"
        DEPENDS "${script}" "${spdc}"
        COMMENT "GGUF: ${model}-${type}.gguf" VERBATIM)
      list(APPEND outputs "${gguf}")
    endforeach()
  endforeach()

  set(spdc "${_specdec_gguf_root}/models/kjv-draft.spdc")
  set(gguf "${ARG_OUTPUT_DIR}/kjv-draft-padded-f16.gguf")
  add_custom_command(OUTPUT "${gguf}"
    COMMAND ${run} convert ${common} --outtype f16 --pad 32 "${spdc}" "${gguf}"
    DEPENDS "${script}" "${spdc}"
    COMMENT "GGUF: kjv-draft-padded-f16.gguf (32 unused tokens appended)" VERBATIM)
  list(APPEND outputs "${gguf}")

  # The BPE draft (a tokenizer of its own: drafts for the byte-level target by text).
  set(spdc "${_specdec_gguf_root}/models/kjv-bpe-draft.spdc")
  set(tokenizer "${_specdec_gguf_root}/models/kjv-bpe.tokenizer")
  set(gguf "${ARG_OUTPUT_DIR}/kjv-bpe-draft-f16.gguf")
  add_custom_command(OUTPUT "${gguf}"
    COMMAND ${run} convert ${common} --outtype f16 --tokenizer "${tokenizer}" "${spdc}" "${gguf}"
    DEPENDS "${script}" "${spdc}" "${tokenizer}"
    COMMENT "GGUF: kjv-bpe-draft-f16.gguf (GPT-2 BPE vocabulary of 1024 tokens)" VERBATIM)
  list(APPEND outputs "${gguf}")

  set(tiny_shape --vocab 16 --layers 1 --d-model 32 --heads 2 --d-ff 64 --context 128)
  set(gguf "${ARG_OUTPUT_DIR}/tiny-disjoint.gguf")
  add_custom_command(OUTPUT "${gguf}"
    COMMAND ${run} random ${common} --outtype f32 --token-text hex "${gguf}" ${tiny_shape}
            --seed 2
    DEPENDS "${script}"
    COMMENT "GGUF: tiny-disjoint.gguf (token text \"<0xBB>\")" VERBATIM)
  list(APPEND outputs "${gguf}")
  foreach(role_seed IN ITEMS target:1 draft:2)
    string(REPLACE ":" ";" role_seed "${role_seed}")
    list(GET role_seed 0 role)
    list(GET role_seed 1 seed)
    set(gguf "${ARG_OUTPUT_DIR}/tiny-${role}.gguf")
    add_custom_command(OUTPUT "${gguf}"
      COMMAND ${run} random ${common} --outtype f32 "${gguf}" ${tiny_shape} --seed ${seed}
      DEPENDS "${script}"
      COMMENT "GGUF: tiny-${role}.gguf (random weights, seed ${seed})" VERBATIM)
    list(APPEND outputs "${gguf}")
  endforeach()
  add_custom_target(${target} ALL DEPENDS ${outputs})

  set(quantized "")
  foreach(model IN ITEMS kjv-target kjv-draft)
    set(spdc "${_specdec_gguf_root}/models/${model}.spdc")
    foreach(type IN ITEMS q8_0 q4_0)
      set(gguf "${ARG_OUTPUT_DIR}/${model}-${type}.gguf")
      add_custom_command(OUTPUT "${gguf}"
        COMMAND ${run} convert ${common} --outtype ${type} "${spdc}" "${gguf}"
        DEPENDS "${script}" "${spdc}"
        COMMENT "GGUF: ${model}-${type}.gguf" VERBATIM)
      list(APPEND quantized "${gguf}")
    endforeach()
  endforeach()
  add_custom_target(${target}_quantized DEPENDS ${quantized})

  set(gguf "${ARG_OUTPUT_DIR}/gpt2-1b-f16.gguf")
  add_custom_command(OUTPUT "${gguf}"
    COMMAND ${run} random ${common} --outtype f16 "${gguf}" --vocab 256 --layers 20
            --d-model 2048 --heads 16 --d-ff 8192 --context 2048 --seed 1
    DEPENDS "${script}"
    COMMENT "GGUF: gpt2-1b-f16.gguf (1.0B random weights, 2.0 GB)" VERBATIM)
  add_custom_target(${target}_1b DEPENDS "${gguf}")
endfunction()
