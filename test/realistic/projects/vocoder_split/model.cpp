// The generator and the runtime helpers of the vocoder.
#include "vocoder.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <iostream>

GeneratorImpl::GeneratorImpl() {
  pre = register_module("pre", torch::nn::Conv1d(torch::nn::Conv1dOptions(kMels, 128, 7).padding(3)));
  norm = register_module("norm", torch::nn::BatchNorm1d(128));
  up1 = register_module("up1", torch::nn::ConvTranspose1d(
                                   torch::nn::ConvTranspose1dOptions(128, 64, 16).stride(8).padding(4)));
  up2 = register_module("up2", torch::nn::ConvTranspose1d(
                                   torch::nn::ConvTranspose1dOptions(64, 32, 16).stride(8).padding(4)));
  post = register_module("post", torch::nn::Conv1d(torch::nn::Conv1dOptions(32, 1, 7).padding(3)));
}

torch::Tensor GeneratorImpl::forward(torch::Tensor mel) {
  auto h = torch::leaky_relu(norm(pre(mel)), 0.2);
  h = torch::leaky_relu(up1(h), 0.2);
  h = torch::leaky_relu(up2(h), 0.2);
  return torch::tanh(post(h));
}

RuntimeInfo probe_runtime() {
  RuntimeInfo info;
  info.has_cuda = torch::cuda::is_available();
  info.devices = info.has_cuda ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  return info;
}

// Lets cuDNN pick its transposed-convolution kernels before the first step.
void warm_up_conv_kernels() {
  at::globalContext().setBenchmarkCuDNN(true);
  // OK(torch-cuda-unguarded): main.cpp calls this only when the RuntimeInfo
  // that probe_runtime() filled says CUDA is there.
  auto opts = torch::TensorOptions().device(torch::kCUDA);
  auto x = torch::randn({4, 128, 64}, opts);
  auto w = torch::randn({128, 64, 16}, opts);
  auto y = torch::conv_transpose1d(x, w, {}, 8, 4);
  std::cout << "warm-up output " << y.sizes() << '\n';
}

void set_training(Generator &gen) { gen->train(); }

void prepare_for_synthesis(Generator &gen) { gen->eval(); }

void zero_all(torch::optim::Optimizer &opt) { opt.zero_grad(); }

void release_activations() {
  // BUG(torch-empty-cache-in-loop): train_vocoder() (train.cpp) runs this
  // through its after_step lambda on every micro-batch.
  c10::cuda::CUDACachingAllocator::emptyCache();
}

void Progress::tick(int64_t step, const torch::Tensor &loss) {
  if (step % every_ != 0)
    return;
  // OK(torch-host-sync-in-loop): only one call in every_ reaches the read.
  std::cout << name_ << " step " << step << " spectral L1 " << loss.item<double>() << '\n';
}
