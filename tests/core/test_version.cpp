#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "frugal/frugal.hpp"

TEST_CASE("core: the version macros, the string and version() agree") {
  auto v = frugal::version();
  CHECK(v.major == FRUGAL_VERSION_MAJOR);
  CHECK(v.minor == FRUGAL_VERSION_MINOR);
  CHECK(v.patch == FRUGAL_VERSION_PATCH);
  std::string s = std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.patch);
  CHECK(s == frugal::version_string());
  CHECK(std::strcmp(FRUGAL_VERSION_STRING, frugal::version_string()) == 0);
}

TEST_CASE("core: the namespace is versioned and inline") {
  static_assert(std::is_same_v<frugal::version_info, frugal::v0::version_info>);
  // The mangled name carries the inline namespace, so two versions never collide at link time.
  CHECK(std::string(typeid(frugal::version_info).name()).find("v0") != std::string::npos);
}
