// The batcher component alone (frugal::batcher): it links no Eigen and no xxHash.
#include <cstdio>
#include <vector>

#include <frugal/batcher.hpp>
#include <frugal/clock.hpp>

int main() {
  using namespace std::chrono_literals;
  frugal::manual_clock clock;
  frugal::batcher<int, int, frugal::fixed_window, frugal::manual_clock> batcher(
      {.window = 5ms, .max_batch = 1}, clock);
  auto answer = batcher.submit(21);
  auto batch = batcher.try_next_batch();
  if (!batch || batch->size() != 1) return 1;
  batch->fulfill(std::vector<int>{batch->requests()[0] * 2});
  if (answer.get() != 42) return 1;
  std::printf("frugal conan test_package batcher component ok\n");
  return 0;
}
