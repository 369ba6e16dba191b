// test_torch_oom.cpp - libcubemem_torch.so's PyTorch entry points, driven as
// PyTorch drives them (dlopen, dlsym, call, catch), on the strict fake driver
// with a 64 MiB device:
//   1. a device that cannot be opened throws, saying why, and a later call
//      retries (issue: a failure to open is not permanent);
//   2. out of memory throws an exception derived from std::exception whose
//      text reads like PyTorch's (size requested, device total and free,
//      what cubemem holds and how much of it is cached), never NULL;
//   3. CUBEMEM_LOG records every allocation, free and failure in the RMM CSV
//      layout, and `cubemem replay` reads the log back;
//   4. the driver saw no violation.
#include <dlfcn.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "torch_cubemem.h"

static int g_failures = 0;
#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);   \
      g_failures++;                                                          \
    }                                                                        \
  } while (0)
#define CHECK_HAS(text, part)                                                               \
  do {                                                                                      \
    if (std::string(text).find(part) == std::string::npos) {                                \
      std::fprintf(stderr, "FAIL %s:%d: \"%s\" not in \"%s\"\n", __FILE__, __LINE__, part,   \
                   std::string(text).c_str());                                              \
      g_failures++;                                                                         \
    }                                                                                       \
  } while (0)

using malloc_fn = void *(*)(ssize_t, int, void *);
using free_fn = void (*)(void *, ssize_t, int, void *);

// Call malloc the way PyTorch does; returns the exception text ("" if none).
static std::string try_alloc(malloc_fn m, ssize_t size, void **out) {
  *out = nullptr;
  try {
    *out = m(size, 0, nullptr);
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

int main() {
  std::string log = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                    "/cubemem-torch-oom-" + std::to_string(getpid()) + ".csv";
  setenv("CUBEMEM_LOG", log.c_str(), 1);
  setenv("CM_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  setenv("FAKECUDA_CAPACITY", "64M", 1);
  setenv("FAKECUDA_DEVICES", "1", 1);
  void *lib = dlopen(CMT_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "cannot load %s: %s\n", CMT_PLUGIN, dlerror());
    return 1;
  }
  auto m = reinterpret_cast<malloc_fn>(dlsym(lib, "cubemem_torch_malloc"));
  auto f = reinterpret_cast<free_fn>(dlsym(lib, "cubemem_torch_free"));
  auto stats = reinterpret_cast<int (*)(int, cubemem_torch_stats_t *)>(dlsym(lib, "cubemem_torch_stats"));
  auto empty = reinterpret_cast<void (*)(void)>(dlsym(lib, "cubemem_torch_empty_cache"));
  auto last = reinterpret_cast<const char *(*)(void)>(dlsym(lib, "cubemem_torch_last_error"));
  CHECK(m && f && stats && empty && last);
  if (!(m && f && stats && empty && last)) return 1;

  // 1. no driver: an exception that says why, then a retry that works
  void *p = nullptr;
  std::string err = try_alloc(m, 1 << 20, &p);
  CHECK(p == nullptr);
  CHECK_HAS(err, "cannot open CUDA device 0");
  CHECK_HAS(err, "/nonexistent/libcuda.so.1");
  CHECK_HAS(err, "tried again at the next allocation");
  CHECK_HAS(last(), "cannot open CUDA device 0");
  setenv("CM_CUDA_LIBRARY", CMT_FAKECUDA, 1);
  std::vector<void *> live;
  for (int i = 0; i < 8; i++) {
    err = try_alloc(m, (ssize_t)(1 + i) << 20, &p);
    CHECK(err.empty());
    CHECK(p != nullptr);
    if (p) live.push_back(p);
  }
  CHECK(try_alloc(m, 0, &p).empty() && p == nullptr); // size 0: NULL, no exception
  f(live.back(), 8 << 20, 0, nullptr);                 // one cached slice
  live.pop_back();

  // 2. out of memory: an exception with PyTorch-like text, never NULL
  err = try_alloc(m, (ssize_t)1 << 30, &p);
  CHECK(p == nullptr);
  std::printf("out-of-memory exception: %s\n", err.c_str());
  CHECK_HAS(err, "CUDA out of memory. Tried to allocate 1.00 GiB.");
  CHECK_HAS(err, "GPU 0 has a total capacity of 64.00 MiB of which");
  CHECK_HAS(err, "is free. cubemem holds");
  CHECK_HAS(err, "allocated and");
  CHECK_HAS(err, "reserved but unallocated (cached)");
  bool typed = false;
  try {
    (void)m((ssize_t)1 << 30, 0, nullptr);
  } catch (const std::exception &e) {
    typed = std::string(e.what()).rfind("CUDA out of memory", 0) == 0;
  } catch (...) {
  }
  CHECK(typed);
  cubemem_torch_stats_t s{};
  CHECK(stats(0, &s) == 1);
  CHECK(s.in_use > 0 && s.reserved >= s.in_use && s.device_total == (64u << 20));
  CHECK(s.failed >= 2);
  for (void *q : live) f(q, 0, 0, nullptr);
  f(reinterpret_cast<void *>(0x1234), 0, 0, nullptr); // unknown: recorded, no crash
  CHECK_HAS(last(), "did not allocate");
  empty();
  CHECK(stats(0, &s) == 1 && s.in_use == 0);
  std::printf("after empty_cache: reserved %llu, live %llu\n", (unsigned long long)s.reserved,
              (unsigned long long)s.live);

  // 4. the strict driver saw nothing wrong (same library, same state)
  void *fake = dlopen(CMT_FAKECUDA, RTLD_NOW | RTLD_LOCAL);
  CHECK(fake != nullptr);
  if (fake) {
    auto viol = reinterpret_cast<uint64_t (*)(void)>(dlsym(fake, "fakecuda_violations"));
    auto lastv = reinterpret_cast<const char *(*)(void)>(dlsym(fake, "fakecuda_last_violation"));
    CHECK(viol && viol() == 0);
    if (viol && viol()) std::fprintf(stderr, "violation: %s\n", lastv());
  }

  // 3. the log: header, 9 allocations, 8 frees, 3 failures; replayable
  empty(); // flushes the log
  std::ifstream in(log);
  std::stringstream all;
  all << in.rdbuf();
  std::string text = all.str();
  CHECK(text.rfind("Thread,Time,Action,Pointer,Size,Stream\n", 0) == 0);
  int allocs = 0, frees = 0, fails = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(",allocate,") != std::string::npos) allocs++;
    if (line.find(",free,") != std::string::npos) frees++;
    if (line.find(",allocate failure,") != std::string::npos) fails++;
  }
  std::printf("log %s: %d allocations, %d frees, %d failures\n", log.c_str(), allocs, frees, fails);
  CHECK(allocs == 8 && frees == 8 && fails == 3);
  std::string cmd = std::string(CMT_CLI) + " replay --no-progress " + log + " > /dev/null";
  CHECK(std::system(cmd.c_str()) == 0);
  std::remove(log.c_str());
  if (g_failures) {
    std::fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("test_torch_oom: ok\n");
  return 0;
}
