import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout


class FrugalTestPackageConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps"
    test_type = "explicit"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        tc = CMakeToolchain(self)
        with_cuda = bool(self.dependencies["frugal"].options.with_cuda)
        tc.cache_variables["WITH_CUDA"] = with_cuda
        if with_cuda:
            # The toolchain's CMAKE_CXX_STANDARD_REQUIRED also asks CUDA for C++20, a flag CMake 3.25
            # does not know for nvcc 13; the C++20 comes from the targets instead.
            tc.blocks.remove("cppstd")
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            self.run(os.path.join(self.cpp.build.bindir, "test_package"), env="conanrun")
            self.run(os.path.join(self.cpp.build.bindir, "test_package_batcher"), env="conanrun")
            if self.dependencies["frugal"].options.with_cuda:
                self.run(os.path.join(self.cpp.build.bindir, "test_package_cuda"), env="conanrun")
