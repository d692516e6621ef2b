# The install/consumer test: `cmake --install` this build tree into a fresh prefix, then
# configure, build and run a separate project (tests/consumer) that finds the installed package
# with find_package(amc). Any failing step fails the test.
#
#   cmake -DAMC_BUILD_DIR=<amc build tree> -DWORK_DIR=<scratch dir> -DCONSUMER_SOURCE_DIR=<dir>
#         -DGENERATOR=<generator> [-DMAKE_PROGRAM=<path>] -DCXX_COMPILER=<path>
#         [-DBUILD_TYPE=<config>] [-DTOOLCHAIN_FILE=<file> -DEMULATOR=<command>]
#         -P install_consumer.cmake
# TOOLCHAIN_FILE and EMULATOR: a cross build's (cmake/toolchain-aarch64.cmake; qemu-aarch64 ...),
# so the consumer is built for the same target and run under the emulator.
cmake_minimum_required(VERSION 3.25)

foreach(var AMC_BUILD_DIR WORK_DIR CONSUMER_SOURCE_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "install_consumer: -D${var}=... is required")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/consumer-build")
file(REMOVE_RECURSE "${WORK_DIR}")  # a fresh prefix each run: no stale files can hide a gap

set(config_args)
if(BUILD_TYPE)
  set(config_args --config "${BUILD_TYPE}")
endif()

message(STATUS "install_consumer: installing ${AMC_BUILD_DIR} to ${prefix}")
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${AMC_BUILD_DIR}" --prefix "${prefix}"
                        ${config_args}
                COMMAND_ERROR_IS_FATAL ANY)

file(GLOB_RECURSE config_files "${prefix}/*/amcConfig.cmake")
if(NOT config_files)
  message(FATAL_ERROR "install_consumer: no amcConfig.cmake under ${prefix}")
endif()
if(NOT EXISTS "${prefix}/include/amc/amc.hpp")
  message(FATAL_ERROR "install_consumer: ${prefix}/include/amc/amc.hpp was not installed")
endif()

message(STATUS "install_consumer: configuring the consumer against ${prefix}")
set(make_program_arg)
if(MAKE_PROGRAM)
  set(make_program_arg "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
set(toolchain_arg)
if(TOOLCHAIN_FILE)
  set(toolchain_arg "-DCMAKE_TOOLCHAIN_FILE=${TOOLCHAIN_FILE}")
endif()
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}"
          -G "${GENERATOR}" ${make_program_arg} ${toolchain_arg}
          "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
          "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
          "-DCMAKE_PREFIX_PATH=${prefix}"
          -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  COMMAND_ERROR_IS_FATAL ANY)

# The package must come from the fresh prefix, not from another amc on the machine.
file(STRINGS "${consumer_build}/CMakeCache.txt" amc_dir_line REGEX "^amc_DIR:")
string(REGEX REPLACE "^amc_DIR:[A-Z]+=" "" amc_dir "${amc_dir_line}")
file(REAL_PATH "${prefix}" real_prefix)
file(REAL_PATH "${amc_dir}" real_amc_dir)
string(FIND "${real_amc_dir}" "${real_prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "install_consumer: the consumer found amc in '${amc_dir}', "
                      "not under the fresh prefix ${prefix}")
endif()

message(STATUS "install_consumer: building the consumer")
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${consumer_build}" ${config_args}
                COMMAND_ERROR_IS_FATAL ANY)

set(consumer "${consumer_build}/amc_consumer")
if(NOT EXISTS "${consumer}" AND BUILD_TYPE)
  set(consumer "${consumer_build}/${BUILD_TYPE}/amc_consumer")  # multi-config generators
endif()
separate_arguments(emulator UNIX_COMMAND "${EMULATOR}")
message(STATUS "install_consumer: running ${emulator} ${consumer}")
execute_process(COMMAND ${emulator} "${consumer}" COMMAND_ERROR_IS_FATAL ANY)
message(STATUS "install_consumer: passed")
