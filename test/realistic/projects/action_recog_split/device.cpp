// Device selection and the cuDNN warm-up.
#include "action.h"

#include <iostream>

torch::Device training_device() {
  // OK(torch-cuda-unguarded): a CPU fallback on the other side.
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

// The ingest node decodes the camera streams on its second card, next to
// the training run on the first.
torch::Device decode_device() {
  if (!torch::cuda::is_available())
    return torch::Device(torch::kCPU);
  // BUG(torch-device-index-unchecked): nothing compares the ordinal with
  // torch::cuda::device_count(); a one-GPU workstation has no device 1.
  return torch::Device(torch::kCUDA, 1);
}

// Lets cuDNN's autotuner pick the 3-D convolution algorithms at the training
// shape before the clock of the first epoch starts.
void warm_up_conv3d(int64_t batch) {
  at::globalContext().setBenchmarkCuDNN(true);
  // BUG(torch-cuda-unguarded): main.cpp calls this on every machine, also
  // the CPU ones training_device() falls back to.
  auto opts = torch::TensorOptions().device(torch::kCUDA);
  auto x = torch::randn({batch, 3, kFrames, kSide, kSide}, opts);
  auto w = torch::randn({32, 3, 1, 3, 3}, opts);
  auto y = torch::conv3d(x, w, {}, {1, 2, 2}, {0, 1, 1});
  std::cout << "conv3d warm-up output " << y.sizes() << '\n';
}
