// frugal::batcher alone: a worker answers a window's requests, each caller gets its own result.
#include <cstdio>
#include <future>
#include <thread>
#include <vector>

#include <frugal/batcher.hpp>

int main() {
  using namespace std::chrono_literals;
  frugal::batcher<int, int> batcher{{.window = 1ms, .max_batch = 8}};
  std::jthread worker([&](std::stop_token stop) {
    while (auto batch = batcher.next_batch(stop)) {
      std::vector<int> out;
      for (int x : batch->requests()) out.push_back(2 * x);
      batch->fulfill(std::move(out));
    }
  });
  std::vector<std::future<int>> answers;
  for (int i = 0; i < 20; ++i) answers.push_back(batcher.submit(i));
  for (int i = 0; i < 20; ++i)
    if (answers[i].get() != 2 * i) return 1;
  std::printf("frugal batcher consumer ok\n");
  return 0;
}
