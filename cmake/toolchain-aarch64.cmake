# Cross build for 64-bit ARM Linux with Debian's cross compiler (g++-aarch64-linux-gnu), tests
# run under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR, used by add_test and ctest).
#
# Libraries: libc and libstdc++ are the cross toolchain's (/usr/aarch64-linux-gnu/lib), PCRE2 and
# utf8proc (libpcre2-dev:arm64, libutf8proc-dev:arm64) come from Debian's multiarch directories;
# the header-only dependencies (Eigen, xsimd, nlohmann-json, CLI11, Catch2 2.x) are
# architecture-independent, so their host packages in /usr are used as they are: the root path
# is /usr/aarch64-linux-gnu first, then / for those headers.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # host tools (python3, pkg-config)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# pkg-config must describe the arm64 libraries (/usr/lib/aarch64-linux-gnu/pkgconfig), not
# the host's.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "/")

# The emulator. -L: qemu looks up the target's absolute paths under /usr/aarch64-linux-gnu first,
# so the ELF interpreter is the cross toolchain's ld.so (libc6-arm64-cross). LD_LIBRARY_PATH:
# libc, libm and libstdc++ from the same place, the ones the executables were linked against.
# Without it the loader's default paths reach /lib/aarch64-linux-gnu/libc.so.6, the multiarch
# libc6:arm64 that libpcre2-dev:arm64 pulls in: a different glibc build than that ld.so
# (2.36-9+deb12u14 against 2.36-8cross1 on Debian 12), so the loader's shared data disagrees
# with libc's and pthread_create loops forever in its stack cache (any test that starts a
# thread hung). The multiarch libraries (PCRE2, utf8proc) are still found on the loader's
# default path /usr/lib/aarch64-linux-gnu and only need libc's stable ABI.
set(CMAKE_CROSSCOMPILING_EMULATOR
    qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib
    CACHE STRING "Runs aarch64 test executables on the build machine")

# Debian installs xsimd's (header-only, architecture-independent) CMake package under the host's
# multiarch directory, where a search for the aarch64-linux-gnu one does not look.
if(NOT xsimd_DIR AND EXISTS /usr/lib/x86_64-linux-gnu/cmake/xsimd)
  set(xsimd_DIR /usr/lib/x86_64-linux-gnu/cmake/xsimd CACHE PATH "xsimd's CMake package (headers only)" FORCE)
endif()
