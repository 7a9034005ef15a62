// REQUIRES: libcxx
// RUN: %check_torch_tidy -std=c++23 %s torch-host-sync-in-loop,torch-tensor-to-discarded %t -- -- -stdlib=libc++

// C++23 user code with std::format and std::print, which need a standard
// library that has them (libc++ 19 here; Debian 12's libstdc++ 12 has
// neither), explicit object parameters and `if consteval`.

#include <torch/torch.h>
#include <format>
#include <print>
#include <string>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

torch::Tensor next_input();

constexpr int scaled(int n) {
  if consteval {
    return n * 2;
  } else {
    return n;
  }
}

struct Logger {
  std::string prefix;
  void log(this const Logger &self, double v) { std::print("{}{:.3f}\n", self.prefix, v); }
};

void train(Net net, torch::optim::SGD &optimizer) {
  net->to(torch::kCUDA);
  Logger logger{"loss "};
  for (int step = 0; step < scaled(500); ++step) {
    auto loss = net(next_input().to(torch::kCUDA)).sum();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    logger.log(loss.item<double>());
    // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step
    // CHECK-MESSAGES: :[[@LINE-4]]:10: note: inside this training loop, which calls 'backward()'
    auto line = std::format("step {}", step);
    loss.cuda();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: result of 'loss.cuda()' is discarded
  }
}
