import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration

# A wrapper for the system's xxHash (Debian: libxxhash-dev), so `conan create` of frugal runs with no
# Conan Center. It packages nothing: the library is a system lib in the default search paths, under
# the same CMake names as Conan Center's xxhash recipe.
_HEADERS = ("/usr/include/xxhash.h", "/usr/local/include/xxhash.h")


class SystemXxHashConan(ConanFile):
    name = "xxhash"
    description = "The system's xxHash, wrapped for offline tests"
    license = "BSD-2-Clause"
    package_type = "shared-library"
    settings = "os", "arch", "compiler", "build_type"

    def set_version(self):
        header = next((h for h in _HEADERS if os.path.isfile(h)), None)
        if header is None:
            raise ConanInvalidConfiguration(f"no {' or '.join(_HEADERS)}: apt-get install libxxhash-dev")
        with open(header) as f:
            text = f.read()
        parts = [re.search(rf"#define XXH_VERSION_{p} +(\d+)", text).group(1) for p in ("MAJOR", "MINOR", "RELEASE")]
        self.version = ".".join(parts)

    def package_id(self):
        self.info.clear()

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "xxHash")
        self.cpp_info.set_property("cmake_target_name", "xxHash::xxhash")
        self.cpp_info.set_property("pkg_config_name", "libxxhash")
        self.cpp_info.includedirs = []
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.system_libs = ["xxhash"]
