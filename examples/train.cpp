// The torch-tidy example: trains Net on synthetic data. Every check of the
// catalog has one bug here or in eval.cpp: a `// BUG(torch-<check>)` comment
// sits right above the statement that check must flag, and an
// `// OK(torch-<check>)` comment above similar code it must accept.
#include "net.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <iostream>
#include <vector>

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

  std::cout << "accuracy " << evaluate(net, eval_device) << '\n';
  std::cout << "confidence " << mean_confidence(net, eval_device) << '\n';
  predict(net, spare);
}
