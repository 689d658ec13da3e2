import os

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, rmdir, save

required_conan_version = ">=2.0"

# The CMake lines CMakeDeps cannot express, included by the consumer's find_package(frugal) after the
# targets are made. frugal::cuda needs the consumer's CUDA toolkit, which no Conan package provides (as
# with CUTLASS), and nvcc 13 needs its C++20 flag passed directly.
_BUILD_MODULES = {
    "cuda": """\
find_package(CUDAToolkit REQUIRED)
set_property(TARGET frugal::cuda APPEND PROPERTY INTERFACE_LINK_LIBRARIES CUDA::cudart CUDA::cublasLt)
set_property(TARGET frugal::cuda APPEND PROPERTY INTERFACE_COMPILE_OPTIONS $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
""",
    # A dependency given by the profile's [platform_requires] has no package, so CMakeDeps makes no target
    # for it; these find it on the system as frugal's own CMake does.
    "eigen": """\
if(NOT TARGET Eigen3::Eigen)
  find_package(Eigen3 3.4 CONFIG REQUIRED)
endif()
set_property(TARGET frugal::quant APPEND PROPERTY INTERFACE_LINK_LIBRARIES Eigen3::Eigen)
""",
    "xxhash": """\
if(NOT TARGET xxHash::xxhash)
  list(PREPEND CMAKE_MODULE_PATH "${CMAKE_CURRENT_LIST_DIR}")
  find_package(xxHash REQUIRED)
  list(POP_FRONT CMAKE_MODULE_PATH)
endif()
set_property(TARGET frugal::cache APPEND PROPERTY INTERFACE_LINK_LIBRARIES xxHash::xxhash)
""",
}
# The host library's components, as frugal's CMake defines them: each dependency belongs to one of them.
_COMPONENTS = {"batcher": None, "cost": None, "pool": None, "cache": "xxhash", "quant": "eigen"}
_DEPENDENCIES = {"eigen": "eigen::eigen", "xxhash": "xxhash::xxhash"}


class FrugalConan(ConanFile):
    name = "frugal"
    version = "0.1.0"
    description = "Header-only C++20 library that cuts the GPU cost of AI inference"
    license = "Apache-2.0"
    url = "https://github.com/frugal-ai/frugal"
    homepage = "https://github.com/frugal-ai/frugal"
    topics = ("inference", "batching", "quantization", "cache", "cuda", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {"with_cuda": [True, False]}
    default_options = {"with_cuda": False}
    exports_sources = "include/*", "cuda/*", "cmake/*.cmake", "cmake/*.in", "CMakeLists.txt", "LICENSE"
    no_copy_source = True

    def layout(self):
        cmake_layout(self, src_folder=".")

    def requirements(self):
        self.requires("eigen/3.4.0")
        self.requires("xxhash/[>=0.8 <0.9]")

    def build_requirements(self):
        # package() runs frugal's own CMake install; a profile can map this to the system's CMake
        # with [platform_tool_requires].
        self.tool_requires("cmake/[>=3.25 <5]")

    def package_id(self):
        # Headers only: one package for every setting and option. The CUDA headers are always
        # packaged; with_cuda only decides whether the frugal::cuda component is declared.
        self.info.clear()

    def validate(self):
        if self.settings.get_safe("compiler.cppstd"):
            check_min_cppstd(self, 20)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["FRUGAL_BUILD_TESTS"] = False
        tc.cache_variables["FRUGAL_BUILD_BENCHMARKS"] = False
        tc.cache_variables["FRUGAL_BUILD_EXAMPLES"] = False
        # The CUDA headers are copied below; configuring them needs no toolkit at package time.
        tc.cache_variables["FRUGAL_ENABLE_CUDA"] = "OFF"
        tc.generate()
        CMakeDeps(self).generate()

    def build(self):
        pass

    def package(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.install()
        # CMakeDeps writes the consumer's config from package_info; the installed one would clash.
        rmdir(self, os.path.join(self.package_folder, "share"))
        copy(self, "*", os.path.join(self.source_folder, "cuda", "frugal", "cuda"),
             os.path.join(self.package_folder, "include", "frugal", "cuda"))
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        copy(self, "FindxxHash.cmake", os.path.join(self.source_folder, "cmake"),
             os.path.join(self.package_folder, "lib", "cmake"))
        for name, text in _BUILD_MODULES.items():
            save(self, os.path.join(self.package_folder, self._module(name)), text)

    @staticmethod
    def _module(name):
        return os.path.join("lib", "cmake", f"frugal-{name}.cmake")

    def _packaged(self, name):
        return any(dep.ref.name == name for _, dep in self.dependencies.host.items())

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "frugal")
        # The root target links every component; it must not take frugal::frugal, the host part alone.
        self.cpp_info.set_property("cmake_target_name", "frugal::all")
        self.cpp_info.set_property("pkg_config_name", "frugal-all")

        modules = []
        for name, dependency in _COMPONENTS.items():
            component = self.cpp_info.components[name]
            component.set_property("cmake_target_name", f"frugal::{name}")
            component.set_property("pkg_config_name", f"frugal-{name}")
            component.bindirs = []
            component.libdirs = []
            if self.settings.os in ("Linux", "FreeBSD"):
                component.system_libs = ["pthread"]
            if dependency:
                if self._packaged(dependency):
                    component.requires.append(_DEPENDENCIES[dependency])
                else:
                    modules.append(self._module(dependency))

        # frugal::frugal: every host component.
        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "frugal::frugal")
        core.set_property("pkg_config_name", "frugal")
        core.bindirs = []
        core.libdirs = []
        core.requires = list(_COMPONENTS)

        if self.options.with_cuda:
            cuda = self.cpp_info.components["cuda"]
            cuda.set_property("cmake_target_name", "frugal::cuda")
            cuda.set_property("pkg_config_name", "frugal-cuda")
            cuda.requires = ["core"]
            cuda.bindirs = []
            cuda.libdirs = []
            modules.append(self._module("cuda"))
        self.cpp_info.set_property("cmake_build_modules", modules)
