#include <cstdio>
#include <cstring>

#include <frugal/frugal.hpp>

int main() {
  if (std::strcmp(frugal::version_string(), FRUGAL_VERSION_STRING) != 0) return 1;
  std::printf("frugal %s conan test_package ok\n", frugal::version_string());
  return 0;
}
