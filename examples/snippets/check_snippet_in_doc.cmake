# Checks that a compiled snippet appears verbatim in a Markdown document.
#
#   cmake -DDOC=<doc.md> -DSNIPPET=<file> -DSNIPPET_NAME=<path shown in the doc> -P this.cmake
#
# The document marks the copy with a line `<!-- snippet: SNIPPET_NAME -->` followed by a fenced
# block (```cpp ... ```); the block's contents must equal the file's contents.
foreach(var DOC SNIPPET SNIPPET_NAME)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_snippet_in_doc: -D${var}=... is required")
  endif()
endforeach()

file(READ "${DOC}" doc)
file(READ "${SNIPPET}" snippet)
set(marker "<!-- snippet: ${SNIPPET_NAME} -->\n```cpp\n")
string(FIND "${doc}" "${marker}" start)
if(start EQUAL -1)
  message(FATAL_ERROR "${DOC}: no line '<!-- snippet: ${SNIPPET_NAME} -->' followed by ```cpp")
endif()
string(LENGTH "${marker}" marker_length)
math(EXPR start "${start} + ${marker_length}")
string(SUBSTRING "${doc}" ${start} -1 rest)
string(FIND "${rest}" "\n```" end)
if(end EQUAL -1)
  message(FATAL_ERROR "${DOC}: the fenced block after the ${SNIPPET_NAME} marker is not closed")
endif()
math(EXPR end "${end} + 1")  # keep the block's final newline
string(SUBSTRING "${rest}" 0 ${end} block)
if(NOT block STREQUAL snippet)
  message(FATAL_ERROR "${DOC}: the copy of ${SNIPPET_NAME} differs from the compiled file; "
                      "paste the file's current contents into the fenced block")
endif()
message(STATUS "${DOC}: ${SNIPPET_NAME} is in sync")
