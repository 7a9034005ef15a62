// Multi-target regression (three sensor readings from twelve features) with a
// Trainer that delegates its decisions to a policy object: the loss, the
// learning-rate schedule and when to log come from an abstract TrainPolicy,
// of which this program has one implementation (SmoothL1Policy). The trainer
// owns the model, the optimizer and the scale that maps normalised targets
// back to physical units.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <utility>

struct RegressorImpl : torch::nn::Module {
  RegressorImpl(int64_t in, int64_t hidden, int64_t out)
      : body(register_module("body", torch::nn::Sequential(torch::nn::Linear(in, hidden), torch::nn::GELU(),
                                                          torch::nn::Linear(hidden, hidden), torch::nn::GELU()))),
        head(register_module("head", torch::nn::Linear(hidden, out))) {}
  torch::Tensor forward(torch::Tensor x) { return head(body->forward(x)); }
  torch::nn::Sequential body;
  torch::nn::Linear head;
};
TORCH_MODULE(Regressor);

class TrainPolicy {
 public:
  virtual ~TrainPolicy() = default;
  virtual torch::Tensor loss(const torch::Tensor &pred, const torch::Tensor &target) = 0;
  virtual double lr_at(int64_t step) const = 0;
  virtual bool should_log(int64_t step) const = 0;
};

class SmoothL1Policy : public TrainPolicy {
 public:
  SmoothL1Policy(double beta, double base_lr, int64_t warmup, int64_t log_every)
      : beta_(beta), base_lr_(base_lr), warmup_(warmup), log_every_(log_every) {}
  torch::Tensor loss(const torch::Tensor &pred, const torch::Tensor &target) override {
    return torch::nn::functional::smooth_l1_loss(pred, target,
                                                 torch::nn::functional::SmoothL1LossFuncOptions().beta(beta_));
  }
  double lr_at(int64_t step) const override {
    if (step < warmup_)
      return base_lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
    return base_lr_;
  }
  bool should_log(int64_t step) const override { return step % log_every_ == 0; }

 private:
  double beta_;
  double base_lr_;
  int64_t warmup_;
  int64_t log_every_;
};

// Puts the model on the training device before the optimizer sees it.
Regressor placed(Regressor model, torch::Device device) {
  model->to(device);
  return model;
}

class Trainer {
 public:
  Trainer(Regressor model, std::unique_ptr<TrainPolicy> policy, torch::Device device, int64_t targets)
      : device_(device),
        model_(placed(std::move(model), device)),
        policy_(std::move(policy)),
        optimizer_(model_->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-4)),
        target_scale_(torch::full({targets}, 2.5)),
        epoch_loss_(torch::zeros({}, device)) {}

  void fit_epoch(const torch::Tensor &features, const torch::Tensor &targets, int64_t batch) {
    model_->train();
    epoch_loss_ = torch::zeros({}, device_);
    int64_t batches = 0;
    for (int64_t start = 0; start + batch <= features.size(0); start += batch) {
      auto x = features.slice(0, start, start + batch).to(device_);
      auto y = targets.slice(0, start, start + batch).to(device_);
      for (auto &group : optimizer_.param_groups())
        static_cast<torch::optim::AdamWOptions &>(group.options()).lr(policy_->lr_at(step_));

      auto pred = model_->forward(x);
      auto loss = policy_->loss(pred, y);
      optimizer_.zero_grad();
      loss.backward();
      optimizer_.step();

      // BUG(torch-loss-accumulation-graph): the policy's loss went through
      // backward(), so it carries its graph; the member keeps every step's.
      epoch_loss_ += loss;
      // BUG(torch-device-mismatch): target_scale_ was made on the CPU in the
      // constructor and is never moved; pred is on device_.
      auto physical = pred * target_scale_;
      track_worst(pred, y);
      if (policy_->should_log(step_)) {
        // OK(torch-host-sync-in-loop): only on the steps the policy logs.
        std::cout << "step " << step_ << " loss " << loss.item<double>() << '\n';
      }
      ++step_;
      ++batches;
      last_physical_ = physical.detach();
    }
    if (batches > 0) {
      // OK(torch-host-sync-in-loop): once per epoch, outside the batch loop.
      std::cout << "epoch mean loss " << (epoch_loss_ / batches).item<double>() << " worst " << worst_ << '\n';
    }
  }

  double validate(const torch::Tensor &features, const torch::Tensor &targets) {
    model_->eval();
    torch::NoGradGuard no_grad;
    double total = 0.0;
    int64_t n = 0;
    for (int64_t start = 0; start < features.size(0); start += 256) {
      auto x = features.slice(0, start, start + 256).to(device_);
      auto y = targets.slice(0, start, start + 256).to(device_);
      // OK(torch-inference-without-no-grad): the guard above covers the loop.
      auto pred = model_->forward(x);
      total += torch::mse_loss(pred, y, torch::Reduction::Sum).item<double>();
      n += x.size(0);
    }
    return total / static_cast<double>(n);
  }

 private:
  // Largest absolute error seen, in normalised units.
  void track_worst(const torch::Tensor &pred, const torch::Tensor &target) {
    auto err = (pred.detach() - target).abs().max();
    // BUG(torch-host-sync-in-loop): fit_epoch() calls this on every step with
    // tensors on device_; the read waits for the whole step to finish.
    worst_ = std::max(worst_, err.item<double>());
  }

  torch::Device device_;
  Regressor model_;
  std::unique_ptr<TrainPolicy> policy_;
  torch::optim::AdamW optimizer_;
  torch::Tensor target_scale_;
  torch::Tensor epoch_loss_;
  torch::Tensor last_physical_;
  double worst_ = 0.0;
  int64_t step_ = 0;
};

int main() {
  torch::manual_seed(7);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  auto features = torch::randn({4096, 12});
  auto weights = torch::randn({12, 3});
  auto targets = torch::tanh(features.matmul(weights)) + 0.05 * torch::randn({4096, 3});
  auto val_features = torch::randn({512, 12});
  auto val_targets = torch::tanh(val_features.matmul(weights));

  Trainer trainer(Regressor(12, 64, 3), std::make_unique<SmoothL1Policy>(1.0, 3e-3, 200, 100), device, 3);
  for (int64_t epoch = 0; epoch < 10; ++epoch) {
    trainer.fit_epoch(features, targets, 64);
    std::cout << "epoch " << epoch << " val mse " << trainer.validate(val_features, val_targets) << '\n';
  }
  return 0;
}
