import os

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, rmdir, save

required_conan_version = ">=2.0"

# The CMake lines CMakeDeps cannot express: frugal::cuda needs the consumer's CUDA toolkit, which no
# Conan package provides (as with CUTLASS), and nvcc 13 needs its C++20 flag passed directly.
_CUDA_BUILD_MODULE = """\
if(TARGET frugal::cuda)
  find_package(CUDAToolkit REQUIRED)
  set_property(TARGET frugal::cuda APPEND PROPERTY INTERFACE_LINK_LIBRARIES CUDA::cudart CUDA::cublasLt)
  set_property(TARGET frugal::cuda APPEND PROPERTY INTERFACE_COMPILE_OPTIONS $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>)
endif()
"""


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
        save(self, os.path.join(self.package_folder, self._cuda_module), _CUDA_BUILD_MODULE)

    @property
    def _cuda_module(self):
        return os.path.join("lib", "cmake", "frugal-cuda-toolkit.cmake")

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "frugal")
        self.cpp_info.set_property("cmake_target_name", "frugal::frugal_all")
        self.cpp_info.set_property("pkg_config_name", "frugal")

        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "frugal::frugal")
        core.set_property("pkg_config_name", "frugal")
        core.requires = ["eigen::eigen", "xxhash::xxhash"]
        core.bindirs = []
        core.libdirs = []
        if self.settings.os in ("Linux", "FreeBSD"):
            core.system_libs = ["pthread"]

        if self.options.with_cuda:
            cuda = self.cpp_info.components["cuda"]
            cuda.set_property("cmake_target_name", "frugal::cuda")
            cuda.requires = ["core"]
            cuda.bindirs = []
            cuda.libdirs = []
            cuda.builddirs = [os.path.join("lib", "cmake")]
            self.cpp_info.set_property("cmake_build_modules", [self._cuda_module])
