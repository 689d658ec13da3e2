// frugal::cache alone (xxHash): a hashed key stores and finds a value.
#include <cstdio>
#include <string>

#include <frugal/cache.hpp>

int main() {
  frugal::lru_cache<std::string> cache{{.max_entries = 16}};
  const frugal::key128 key = frugal::hash_key("model-v1", std::string("hello"));
  cache.put(key, "world");
  const auto hit = cache.get(key);
  if (!hit || *hit != "world") return 1;
  if (cache.get(frugal::hash_key("model-v1", std::string("other")))) return 1;
  std::printf("frugal cache consumer ok\n");
  return 0;
}
