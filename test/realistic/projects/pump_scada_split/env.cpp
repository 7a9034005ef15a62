// Device selection and timing, shared by every other file.
#include "scada.h"

#include <iostream>

namespace {
torch::Device g_device(torch::kCPU);
bool g_cuda = false;
}  // namespace

void Env::init(uint64_t seed) {
  torch::manual_seed(seed);
  if (torch::cuda::is_available()) {
    g_cuda = true;
    // OK(torch-cuda-unguarded): only after is_available() said so.
    g_device = torch::Device(torch::kCUDA);
    at::globalContext().setBenchmarkCuDNN(true);
  }
  std::cout << "running on " << g_device << '\n';
}

torch::Device Env::device() { return g_device; }

bool Env::has_cuda() { return g_cuda; }

// Brings the CUDA context up front so that the first timed lap is not charged
// for it.
StepTimer::StepTimer() : start_(std::chrono::steady_clock::now()) {
  // BUG(torch-cuda-unguarded): main.cpp builds the timer on every machine,
  // also where Env::init() stayed on the CPU.
  auto warm = torch::ones({1}, torch::TensorOptions().device(torch::kCUDA));
  warm.add_(1);
  torch::cuda::synchronize();
  start_ = std::chrono::steady_clock::now();
}

double StepTimer::lap() {
  if (Env::has_cuda())
    torch::cuda::synchronize();
  const auto now = std::chrono::steady_clock::now();
  const std::chrono::duration<double> took = now - start_;
  start_ = now;
  return took.count();
}
