// A small trainer with a callback registry, in the style of training
// frameworks: hooks registered by name, hooks run after every step, a
// function pointer for the learning-rate schedule, and a std::function that
// reports the loss.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(32, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 4));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mlp);

using Hook = std::function<void()>;

double constant_lr(int) { return 1e-3; }

double warmup_lr(int step) { return step < 100 ? 1e-3 * (step + 1) / 100.0 : 1e-3; }

class Trainer {
 public:
  explicit Trainer(torch::Device device) : device_(device) {
    model_->to(device_);
    step_hooks_.push_back([this] { ++steps_seen_; });
    step_hooks_.push_back([] {
      // BUG(torch-empty-cache-in-loop): fit() runs every step hook after
      // every step; this one drains and frees the allocator's cache.
      c10::cuda::CUDACachingAllocator::emptyCache();
    });
    // Hooks picked by name: "log" runs every step, "end" once after the loop.
    // OK(torch-empty-cache-in-loop): fit() calls the "end" hook after its loop.
    named_hooks_["end"] = [] { c10::cuda::CUDACachingAllocator::emptyCache(); };
    named_hooks_["log"] = [this] { std::cout << "steps " << steps_seen_ << '\n'; };
  }

  void set_schedule(double (*schedule)(int)) { schedule_ = schedule; }

  void fit(int steps) {
    torch::optim::SGD opt(model_->parameters(), torch::optim::SGDOptions(1e-3));
    for (int step = 0; step < steps; ++step) {
      for (auto &group : opt.param_groups())
        static_cast<torch::optim::SGDOptions &>(group.options()).lr(schedule_(step));
      auto x = torch::randn({64, 32}, device_);
      auto y = torch::randint(0, 4, {64}, torch::TensorOptions(device_).dtype(torch::kLong));
      auto loss = torch::nn::functional::cross_entropy(model_->forward(x), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      for (auto &hook : step_hooks_)
        hook();
      named_hooks_.at("log")();
    }
    named_hooks_.at("end")();
  }

 private:
  torch::Device device_;
  Mlp model_;
  std::vector<Hook> step_hooks_;
  std::map<std::string, Hook> named_hooks_;
  double (*schedule_)(int) = &constant_lr;
  int64_t steps_seen_ = 0;
};

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Trainer trainer(device);
  trainer.set_schedule(&warmup_lr);
  trainer.fit(500);
  return 0;
}
