// frugal::pool alone: the first acquire loads the model once, a lease keeps it loaded.
#include <cstdio>
#include <memory>

#include <frugal/pool.hpp>

struct model {
  int id;
};

int main() {
  int loads = 0;
  frugal::model_pool<model> pool(
      {.budget_bytes = 1 << 20,
       .models = {{.name = "small", .estimated_bytes = 1024}},
       .load = [&](const frugal::model_spec<>&) {
         ++loads;
         return frugal::loaded_model<model>{std::make_unique<model>(model{7}), 1024};
       }});
  {
    auto lease = pool.acquire("small");
    if (lease->id != 7) return 1;
  }
  auto again = pool.acquire("small");
  if (loads != 1 || again->id != 7) return 1;
  std::printf("frugal pool consumer ok\n");
  return 0;
}
