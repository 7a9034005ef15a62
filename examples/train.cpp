// The torch-tidy example: trains Net on synthetic data. Every check of the
// catalog has one bug here or in eval.cpp: a `// BUG(torch-<check>)` comment
// sits right above the statement that check must flag, and an
// `// OK(torch-<check>)` comment above similar code it must accept.
#include "net.h"

#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/version.h>

#include <iostream>
#include <vector>

// Fine-tunes the classifier with gradient accumulation (a large effective
// batch on a small GPU), then polishes the output layer on one batch.
void fine_tune(Net &net, torch::Device device, int64_t accum_steps) {
  torch::optim::SGD optimizer(net->parameters(), /*lr=*/0.001);
  auto loader = make_loader(/*examples=*/512, /*batch_size=*/32);
  int64_t micro = 0;
  for (auto &batch : *loader) {
    auto loss = torch::nll_loss(net->forward(batch.data.to(device)),
                                batch.target.to(device));
    // BUG(torch-grad-accumulation-unscaled): nll_loss is a mean; the
    // gradients of accum_steps of them add up before one step.
    loss.backward();
    if (++micro % accum_steps == 0) {
      optimizer.step();
      optimizer.zero_grad();
    }
  }

  torch::optim::SGD head(net->fc2->parameters(), /*lr=*/0.001);
  auto x = torch::randn({64, 784}).to(device);
  auto y = torch::randint(0, 10, {64}, torch::kLong).to(device);
  for (int i = 0; i < 20; ++i) {
    // OK(torch-grad-accumulation-unscaled): a step on every iteration.
    torch::nll_loss(net->forward(x), y).backward();
    // BUG(torch-missing-zero-grad): nothing resets the gradients, so each
    // step applies the sum of all earlier ones.
    head.step();
  }
}

// Switch CUDA autocast on and off (the 2.x spelling where it exists).
void amp_on() {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
  at::autocast::set_enabled(true);
#endif
}
void amp_off() {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
  at::autocast::set_enabled(false);
#endif
}

// A few mixed-precision steps (bfloat16, no loss scaling needed) that warm
// the kernels up before the real run.
void warm_up_amp(Net &net, torch::Device device) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
#else
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
#endif
  torch::optim::SGD optimizer(net->parameters(), /*lr=*/0.001);
  auto x = torch::randn({64, 784}).to(device);
  auto y = torch::randint(0, 10, {64}, torch::kLong).to(device);
  for (int i = 0; i < 3; ++i) {
    optimizer.zero_grad();
    amp_on();
    auto loss = torch::nll_loss(net->forward(x), y);
    // BUG(torch-autocast-region): backward() runs inside the autocast
    // region; PyTorch runs the backward pass outside autocast.
    loss.backward();
    amp_off();
    optimizer.step();
  }
}

int main() {
  torch::manual_seed(0);
  // OK(torch-cuda-unguarded): CUDA only when it is available, else the CPU.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  // BUG(torch-device-index-unchecked): ordinal 1 is never compared with
  // device_count(); with CUDA_VISIBLE_DEVICES=0 the process sees one GPU.
  torch::Device spare =
      torch::cuda::is_available() ? torch::Device(torch::kCUDA, 1) : device;
  torch::Device eval_device = second_device(device);

  init_cuda_context();

  Net net;
  net->to(device);
  torch::optim::SGD optimizer(net->parameters(), /*lr=*/0.01);
  auto loader = make_loader(/*examples=*/1024, /*batch_size=*/64);
  std::vector<torch::Tensor> losses;

  for (int epoch = 0; epoch < 3; ++epoch) {
    auto running = torch::zeros({}, device);
    int64_t step = 0;
    for (auto &batch : *loader) {
      // BUG(torch-non-blocking-pageable): loader batches are pageable, so
      // this copy is synchronous whatever non_blocking says.
      auto data = batch.data.to(device, /*non_blocking=*/true);
      // OK(torch-non-blocking-pageable): a plain blocking copy.
      auto target = batch.target.to(device);

      optimizer.zero_grad();
      auto loss = torch::nll_loss(net->forward(data), target);
      loss.backward();
      optimizer.step();

      // BUG(torch-loss-accumulation-graph): keeps every step's graph alive.
      losses.push_back(loss);
      // OK(torch-loss-accumulation-graph): detached, summed on the device.
      running += loss.detach();

      // BUG(torch-host-sync-in-loop): .item() waits for the GPU every step.
      std::cout << "loss " << loss.item<float>() << '\n';
      // OK(torch-host-sync-in-loop): syncs once every 100 steps.
      if (++step % 100 == 0)
        std::cout << "mean loss " << (running / step).item<float>() << '\n';
    }
    // BUG(torch-empty-cache-in-loop): frees the cache every epoch, and the
    // next epoch cudaMallocs it all again.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
  // OK(torch-empty-cache-in-loop): once, after training.
  c10::cuda::CUDACachingAllocator::emptyCache();
  std::cout << losses.size() << " steps\n";

  {
    // Score a large held-out batch in one go.
    torch::NoGradGuard no_grad;
    auto big = torch::randn({8192, 784}).to(device);
    torch::Tensor scores;
    try {
      scores = net->forward(big);
    } catch (const c10::OutOfMemoryError &) {
      // BUG(torch-empty-cache-oom-retry): the allocator emptied its cache
      // before it raised; the same-size retry runs out of memory again.
      c10::cuda::CUDACachingAllocator::emptyCache();
      scores = net->forward(big);
    }
    try {
      scores = net->forward(big);
    } catch (const c10::OutOfMemoryError &) {
      // OK(torch-empty-cache-oom-retry): retry in halves, no emptyCache().
      auto halves = big.chunk(2);
      scores = torch::cat({net->forward(halves[0]), net->forward(halves[1])});
    }
  }

  fine_tune(net, device, /*accum_steps=*/8);
  warm_up_amp(net, device);
  std::cout << "accuracy " << evaluate(net, eval_device) << '\n';
  std::cout << "confidence " << mean_confidence(net, eval_device) << '\n';
  predict(net, spare);
}
