// torch-tidy-probe: measures, on the machine it runs on, the facts behind
// torch-tidy's transfer and memory checks.
//
//   - H2D bandwidth from pageable and from pinned memory;
//   - whether a cudaMemcpyAsync (what non_blocking=true issues) overlaps a
//     kernel on another stream, from pageable and from pinned memory, and
//     how long the host is blocked inside the call;
//   - the cost per step of cudaFree + cudaMalloc churn (what emptyCache in a
//     loop causes) against reusing one allocation (the caching allocator);
//   - the device count and the ordinals CUDA_VISIBLE_DEVICES exposes.
//
// usage: torch-tidy-probe [--mib N] [--reps N] [--steps N] [--json PATH]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

#define CHECK(call)                                                                 \
  do {                                                                              \
    cudaError_t err_ = (call);                                                      \
    if (err_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "torch-tidy-probe: %s failed at %s:%d: %s\n", #call,     \
                   __FILE__, __LINE__, cudaGetErrorString(err_));                   \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Spins for `ns` nanoseconds of GPU time (the global timer needs no clock rate).
__global__ void spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

__global__ void touch(char *p, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n)
    p[i] = 1;
}

struct Row {
  std::string name, value, key;
  double number;
};
std::vector<Row> rows;

void add(const std::string &key, const std::string &name, double number, const char *fmt,
         const char *unit) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, number);
  rows.push_back({name, std::string(buf) + (unit[0] ? " " : "") + unit, key, number});
}

double h2dBandwidth(void *dst, const void *src, size_t bytes, int reps) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));  // warm-up
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i)
    CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return double(bytes) * reps / (ms / 1e3) / 1e9;
}

struct Overlap {
  double hostBlockedMs, kernelMs, copyMs, overlapMs;
};

// A kernel on one stream, then a cudaMemcpyAsync on another; how much of the
// copy ran while the kernel did?
Overlap overlapWithKernel(void *dst, const void *src, size_t bytes) {
  cudaStream_t sk, sc;
  CHECK(cudaStreamCreateWithFlags(&sk, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&sc, cudaStreamNonBlocking));
  cudaEvent_t k0, k1, c0, c1;
  for (cudaEvent_t *e : {&k0, &k1, &c0, &c1})
    CHECK(cudaEventCreate(e));
  // Long enough to cover the copy if the copy can overlap at all.
  const unsigned long long kernelNs = 50ull * 1000 * 1000;
  CHECK(cudaEventRecord(k0, sk));
  spin<<<1, 1, 0, sk>>>(kernelNs);
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(k1, sk));
  CHECK(cudaEventRecord(c0, sc));
  auto t0 = Clock::now();
  CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, sc));
  double hostMs = msSince(t0);
  CHECK(cudaEventRecord(c1, sc));
  CHECK(cudaDeviceSynchronize());
  float kEnd = 0, cStart = 0, cEnd = 0;
  CHECK(cudaEventElapsedTime(&kEnd, k0, k1));
  CHECK(cudaEventElapsedTime(&cStart, k0, c0));
  CHECK(cudaEventElapsedTime(&cEnd, k0, c1));
  double overlap = std::max(0.0, std::min<double>(kEnd, cEnd) - std::max<double>(0.0, cStart));
  for (cudaEvent_t e : {k0, k1, c0, c1})
    CHECK(cudaEventDestroy(e));
  CHECK(cudaStreamDestroy(sk));
  CHECK(cudaStreamDestroy(sc));
  return {hostMs, kEnd, cEnd - cStart, overlap};
}

// Per-step cost of freeing and re-allocating `bytes` against reusing it.
void churn(size_t bytes, int steps, double &churnUs, double &reuseUs) {
  unsigned blocks = unsigned((bytes + 255) / 256);
  char *p = nullptr;
  CHECK(cudaMalloc(&p, bytes));
  CHECK(cudaFree(p));
  auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) {
    CHECK(cudaMalloc(&p, bytes));
    touch<<<blocks, 256>>>(p, bytes);
    CHECK(cudaFree(p));  // implicitly synchronises the device
  }
  CHECK(cudaDeviceSynchronize());
  churnUs = msSince(t0) * 1e3 / steps;
  CHECK(cudaMalloc(&p, bytes));
  t0 = Clock::now();
  for (int i = 0; i < steps; ++i) {
    touch<<<blocks, 256>>>(p, bytes);
    CHECK(cudaStreamSynchronize(nullptr));  // same number of host waits
  }
  reuseUs = msSince(t0) * 1e3 / steps;
  CHECK(cudaFree(p));
}

void writeJson(const char *path, int devices, const char *visible) {
  FILE *f = std::fopen(path, "w");
  if (!f) {
    std::fprintf(stderr, "torch-tidy-probe: cannot write %s\n", path);
    return;
  }
  std::fprintf(f, "{\"devices\": %d, \"cuda_visible_devices\": \"%s\"", devices,
               visible ? visible : "");
  for (const auto &r : rows)
    std::fprintf(f, ", \"%s\": %.6g", r.key.c_str(), r.number);
  std::fprintf(f, "}\n");
  std::fclose(f);
}

} // namespace

int main(int argc, char **argv) {
  size_t mib = 64;
  int reps = 10, steps = 100;
  const char *jsonPath = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "torch-tidy-probe: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--mib") mib = std::strtoul(next(), nullptr, 10);
    else if (a == "--reps") reps = std::atoi(next());
    else if (a == "--steps") steps = std::atoi(next());
    else if (a == "--json") jsonPath = next();
    else {
      std::fprintf(stderr, "usage: torch-tidy-probe [--mib N] [--reps N] [--steps N] [--json PATH]\n");
      return 2;
    }
  }
  if (mib == 0 || reps <= 0 || steps <= 0) {
    std::fprintf(stderr, "torch-tidy-probe: sizes and counts must be positive\n");
    return 2;
  }

  const char *visible = std::getenv("CUDA_VISIBLE_DEVICES");
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("torch-tidy-probe: CUDA driver %d, runtime %d\n", driver, runtime);
  std::printf("CUDA_VISIBLE_DEVICES=%s -> %d device(s)%s%s\n", visible ? visible : "(unset)",
              e == cudaSuccess ? devices : 0, e == cudaSuccess ? "" : ": ",
              e == cudaSuccess ? "" : cudaGetErrorString(e));
  if (e != cudaSuccess || devices == 0)
    return 3;
  for (int d = 0; d < devices; ++d) {
    cudaDeviceProp p{};
    CHECK(cudaGetDeviceProperties(&p, d));
    char bus[32] = {0};
    CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, d));
    std::printf("  cuda:%d  %s  sm_%d%d  %.1f GiB  pci %s  uuid ", d, p.name, p.major, p.minor,
                p.totalGlobalMem / double(1ull << 30), bus);
    for (int i = 0; i < 16; ++i)
      std::printf("%02x", static_cast<unsigned char>(p.uuid.bytes[i]));
    std::printf("\n");
  }
  std::printf("  (ordinals are renumbered from 0 over the devices CUDA_VISIBLE_DEVICES lists)\n\n");

  CHECK(cudaSetDevice(0));
  const size_t bytes = mib << 20;
  std::vector<char> pageable(bytes, 1);
  char *pinned = nullptr, *dev = nullptr;
  CHECK(cudaMallocHost(&pinned, bytes));
  std::memset(pinned, 1, bytes);
  CHECK(cudaMalloc(&dev, bytes));

  double bwPageable = h2dBandwidth(dev, pageable.data(), bytes, reps);
  double bwPinned = h2dBandwidth(dev, pinned, bytes, reps);
  add("h2d_pageable_gbps", "H2D bandwidth, pageable", bwPageable, "%.1f", "GB/s");
  add("h2d_pinned_gbps", "H2D bandwidth, pinned", bwPinned, "%.1f", "GB/s");
  add("pinned_speedup", "pinned / pageable", bwPinned / bwPageable, "%.2f", "x");

  Overlap op = overlapWithKernel(dev, pageable.data(), bytes);
  Overlap oq = overlapWithKernel(dev, pinned, bytes);
  add("async_pageable_host_blocked_ms", "cudaMemcpyAsync from pageable: host blocked",
      op.hostBlockedMs, "%.3f", "ms");
  add("async_pageable_overlap_pct", "  copy overlapped with a kernel",
      op.copyMs > 0 ? 100.0 * op.overlapMs / op.copyMs : 0, "%.0f", "%");
  add("async_pinned_host_blocked_ms", "cudaMemcpyAsync from pinned: host blocked",
      oq.hostBlockedMs, "%.3f", "ms");
  add("async_pinned_overlap_pct", "  copy overlapped with a kernel",
      oq.copyMs > 0 ? 100.0 * oq.overlapMs / oq.copyMs : 0, "%.0f", "%");

  double churnUs = 0, reuseUs = 0;
  churn(bytes, steps, churnUs, reuseUs);
  add("step_us_free_malloc", "step with cudaFree+cudaMalloc", churnUs, "%.1f", "us");
  add("step_us_reuse", "step reusing the allocation", reuseUs, "%.1f", "us");
  add("churn_overhead_us", "churn cost per step", churnUs - reuseUs, "%.1f", "us");

  std::string title = "measurement, " + std::to_string(mib) + " MiB buffers";
  std::printf("%-46s %s\n", title.c_str(), "value");
  for (const auto &r : rows)
    std::printf("%-46s %s\n", r.name.c_str(), r.value.c_str());
  if (jsonPath)
    writeJson(jsonPath, devices, visible);

  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(pinned));
  return 0;
}
