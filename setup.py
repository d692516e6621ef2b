"""Builds the extension module amc._amc with CMake (pyproject.toml has the package metadata).

setuptools' build_ext runs CMake on this checkout with only the library and the module enabled
(no tests, benchmarks, examples or tools), for the interpreter running the build, and puts the
module where setuptools packs it. Nothing is downloaded: CMake finds Eigen, xsimd,
nlohmann-json, pybind11 and dlpack.h from the system (Debian packages; docs/python.md).
Set AMC_CMAKE_ARGS to pass more options to CMake, CMAKE_BUILD_PARALLEL_LEVEL for its jobs.
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        output = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build = Path(self.build_temp).resolve() / "cmake"
        build.mkdir(parents=True, exist_ok=True)
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build),
            "-DCMAKE_BUILD_TYPE=Release",
            "-DAMC_BUILD_PYTHON=ON",
            "-DAMC_BUILD_TESTS=OFF", "-DAMC_BUILD_BENCH=OFF", "-DAMC_BUILD_EXAMPLES=OFF",
            "-DAMC_BUILD_TOOLS=OFF",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DAMC_PYTHON_OUTPUT_DIR={output}",
        ] + shlex.split(os.environ.get("AMC_CMAKE_ARGS", ""))
        subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "--build", str(build), "--target", "_amc", "-j", jobs],
                       check=True)


setup(ext_modules=[CMakeExtension("amc._amc")], cmdclass={"build_ext": CMakeBuild})
