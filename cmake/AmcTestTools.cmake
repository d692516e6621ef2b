# Running the project's own executables from test scripts (Python, cmake -P) in a cross build.
#
# ctest runs an add_test(COMMAND <target>) under CMAKE_CROSSCOMPILING_EMULATOR by itself, but a
# script that is handed $<TARGET_FILE:tool> and runs the tool would exec a foreign binary. In a
# cross build with an emulator (preset aarch64: qemu-aarch64), amc_tool_path gives such scripts
# a small wrapper instead, build/<preset>/emulated/<tool>, that execs the emulator on the tool;
# in a native build it is the tool itself.

# amc_tool_path(OUT TARGET): sets OUT to a path (generator expression) that runs TARGET.
function(amc_tool_path out target)
  if(NOT CMAKE_CROSSCOMPILING OR NOT CMAKE_CROSSCOMPILING_EMULATOR)
    set(${out} "$<TARGET_FILE:${target}>" PARENT_SCOPE)
    return()
  endif()
  _amc_emulated_wrapper(wrapper ${target} "$<TARGET_FILE:${target}>")
  set(${out} "${wrapper}" PARENT_SCOPE)
endfunction()

# amc_tool_alias_path(OUT TARGET ALIAS): the same for ALIAS, a symbolic link to TARGET next to it
# (amc-qwen2 -> amc-generate): the link itself, or in a cross build a wrapper running the link.
function(amc_tool_alias_path out target alias)
  if(NOT CMAKE_CROSSCOMPILING OR NOT CMAKE_CROSSCOMPILING_EMULATOR)
    set(${out} "$<TARGET_FILE_DIR:${target}>/${alias}" PARENT_SCOPE)
    return()
  endif()
  _amc_emulated_wrapper(wrapper ${alias} "$<TARGET_FILE_DIR:${target}>/${alias}")
  set(${out} "${wrapper}" PARENT_SCOPE)
endfunction()

# _amc_emulated_wrapper(OUT NAME PROGRAM): writes build/<preset>/emulated/NAME, a shell script
# that execs the emulator on PROGRAM (a generator expression), once however many tests run it.
function(_amc_emulated_wrapper out name program)
  set(wrapper "${PROJECT_BINARY_DIR}/emulated/${name}")
  set(${out} "${wrapper}" PARENT_SCOPE)
  get_property(done GLOBAL PROPERTY AMC_EMULATED_${name})
  if(done)
    return()
  endif()
  set_property(GLOBAL PROPERTY AMC_EMULATED_${name} TRUE)
  # The emulator by absolute path: some tests run the tools with a PATH that lacks it.
  set(emulator ${CMAKE_CROSSCOMPILING_EMULATOR})
  list(POP_FRONT emulator emulator_program)
  find_program(AMC_EMULATOR_PROGRAM "${emulator_program}" REQUIRED NO_CMAKE_FIND_ROOT_PATH)
  set(words "'${AMC_EMULATOR_PROGRAM}' ")
  foreach(word IN LISTS emulator)
    string(APPEND words "'${word}' ")
  endforeach()
  file(GENERATE OUTPUT "${wrapper}"
       CONTENT "#!/bin/sh\n# Runs ${name} (built for ${CMAKE_SYSTEM_PROCESSOR}) under the emulator.\nexec ${words}'${program}' \"$@\"\n"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                        WORLD_READ WORLD_EXECUTE)
endfunction()

# amc_emulator_command(OUT): the emulator as one space-separated string, for a cmake -P script
# that builds and runs a program for the target (separate_arguments splits it again); empty in a
# native build.
function(amc_emulator_command out)
  set(command "")
  if(CMAKE_CROSSCOMPILING AND CMAKE_CROSSCOMPILING_EMULATOR)
    list(JOIN CMAKE_CROSSCOMPILING_EMULATOR " " command)
  endif()
  set(${out} "${command}" PARENT_SCOPE)
endfunction()
