#pragma once

// The message of the exception a call throws, for tests that check what an error says.
#include <exception>
#include <string>

namespace frugal_test {

// e.what() of the std::exception that f() throws, or "(no exception)".
template <class F>
std::string what_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace frugal_test
