import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration

# A wrapper for the system's Eigen (Debian: libeigen3-dev), so `conan create` of frugal runs with no
# Conan Center. It packages nothing: package_info points at the system headers, under the same CMake
# names as Conan Center's eigen recipe.
_HEADER_DIRS = ("/usr/include/eigen3", "/usr/local/include/eigen3")


def _system_dir():
    return next((d for d in _HEADER_DIRS if os.path.isfile(os.path.join(d, "Eigen", "Core"))), None)


class SystemEigenConan(ConanFile):
    name = "eigen"
    description = "The system's Eigen headers, wrapped for offline tests"
    license = "MPL-2.0"
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"

    def set_version(self):
        d = _system_dir()
        if d is None:
            raise ConanInvalidConfiguration(f"no Eigen in {', '.join(_HEADER_DIRS)}: apt-get install libeigen3-dev")
        with open(os.path.join(d, "Eigen", "src", "Core", "util", "Macros.h")) as f:
            text = f.read()
        parts = [re.search(rf"#define EIGEN_{p}_VERSION (\d+)", text).group(1) for p in ("WORLD", "MAJOR", "MINOR")]
        self.version = ".".join(parts)

    def package_id(self):
        self.info.clear()

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "Eigen3")
        self.cpp_info.set_property("cmake_target_name", "Eigen3::Eigen")
        self.cpp_info.set_property("pkg_config_name", "eigen3")
        self.cpp_info.includedirs = [_system_dir()]
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
