# ctest fixtures tokenizer_golden_ids_<family>: write the golden ids test_tokenizer compares with,
# by running make_golden_ids.mjs (node) in the npm folder that scripts/npm-test-deps fills.
#   cmake -DNODE=... -DNPM_DIR=... -DSCRIPT=... -DFAMILY=... -DPACKAGE=... -DOUT=... -P golden_ids.cmake
# Missing node or packages fail the test with one line that says what to do.
set(hint "run scripts/npm-test-deps (needs Debian's nodejs and npm; scripts/quickstart test runs it)")
set(test "tokenizer_golden_ids_${FAMILY}")
if(NOT NODE OR NOT EXISTS "${NODE}")  # not found at configure time: maybe installed since
  find_program(node_at_test_time node)
  set(NODE "${node_at_test_time}")
endif()
if(NOT NODE)
  message(FATAL_ERROR "${test}: node not found; ${hint}")
endif()
foreach(package IN ITEMS @huggingface/tokenizers ${PACKAGE})
  if(NOT EXISTS "${NPM_DIR}/node_modules/${package}/package.json")
    message(FATAL_ERROR "${test}: npm package ${package} missing in ${NPM_DIR}; ${hint}")
  endif()
endforeach()
execute_process(COMMAND "${NODE}" "${SCRIPT}" "${FAMILY}" "${OUT}"
  WORKING_DIRECTORY "${NPM_DIR}"
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${test}: ${SCRIPT} failed (${result}); ${hint}")
endif()
