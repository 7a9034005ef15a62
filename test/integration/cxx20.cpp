// REQUIRES: libtorch, cuda-headers
// UNSUPPORTED: libtorch-1.13
// RUN: %check_torch_tidy -std=c++20 %s torch-device-mismatch,torch-tensor-to-discarded,torch-empty-cache-in-loop,torch-loss-accumulation-graph %t -- -- %libtorch_includes

// C++20 user code (concepts, ranges, designated initialisers, templated
// lambdas, <=>, std::span) on the real headers. Not on 1.13: its headers do
// not compile as C++20 (C++20's constexpr std::vector needs c10::IValue
// complete where ivalue.h instantiates std::vector<IValue>); 2.x's do.

#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <compare>
#include <concepts>
#include <ranges>
#include <span>
#include <vector>

template <typename T>
concept Movable = requires(T t) { t.to(torch::kCUDA); };
static_assert(Movable<torch::Tensor>);

struct TrainConfig {
  int steps = 1;
  bool release_cache = false;
  auto operator<=>(const TrainConfig &) const = default;
};

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

void move_all(std::span<torch::Tensor> tensors) {
  for (torch::Tensor &t : tensors)
    t.to(torch::kCUDA);
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: result of 't.to(...)' is discarded
}

void train(Net net, torch::optim::SGD &optimizer, std::vector<torch::Tensor> &batches) {
  constexpr TrainConfig cfg{.steps = 10, .release_cache = true};
  static_assert(cfg > TrainConfig{.steps = 1});
  torch::Tensor total = torch::zeros({});
  for (const torch::Tensor &b : batches | std::views::take(cfg.steps)) {
    auto loss = net(b).sum();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    total += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total', declared outside the loop
    // CHECK-FIXES: {{^}}    total += loss.detach();{{$}}
    if constexpr (cfg.release_cache)
      c10::cuda::CUDACachingAllocator::emptyCache();
    // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'emptyCache()' inside a loop
    // CHECK-MESSAGES: :[[@LINE-11]]:3: note: the loop that repeats the call
  }
  auto count = []<std::integral I>(I n) { return n * 2; };
  auto a = torch::ones({count(2)}, torch::kCUDA);
  auto c = torch::zeros({4});
  torch::cat({a, c});
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'at::cat' combines 'a' on CUDA with 'c' on CPU
}
