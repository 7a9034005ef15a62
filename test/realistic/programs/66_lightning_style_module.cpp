// A small Lightning-style framework: a LightningModule base with virtual
// training_step / validation_step / configure_optimizer hooks, and a Trainer
// that owns the loops, moves the module to its device, and calls the hooks.
// One concrete module, a tabular classifier with a running accuracy, is
// trained with it. The framework code and the model code were written by
// different people.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <vector>

struct Batch {
  torch::Tensor x;
  torch::Tensor y;
};

class LightningModule : public torch::nn::Module {
 public:
  ~LightningModule() override = default;
  virtual torch::Tensor training_step(const Batch &batch, torch::Device device) = 0;
  virtual void validation_step(const Batch &batch, torch::Device device) = 0;
  virtual std::unique_ptr<torch::optim::Optimizer> configure_optimizer() = 0;
  virtual void on_train_batch_end(const torch::Tensor &loss) {}
  virtual void on_validation_start() {}
  virtual void on_validation_end(int64_t epoch) {}
};

class TabularClassifier : public LightningModule {
 public:
  TabularClassifier(int64_t features, int64_t classes)
      : fc1(register_module("fc1", torch::nn::Linear(features, 128))),
        drop(register_module("drop", torch::nn::Dropout(0.2))),
        fc2(register_module("fc2", torch::nn::Linear(128, classes))) {}

  torch::Tensor forward(const torch::Tensor &x) { return fc2->forward(drop->forward(torch::relu(fc1->forward(x)))); }

  torch::Tensor training_step(const Batch &batch, torch::Device device) override {
    auto logits = forward(batch.x.to(device));
    // OK(torch-device-mismatch): the targets are moved with the inputs.
    return torch::nn::functional::cross_entropy(logits, batch.y.to(device));
  }

  void validation_step(const Batch &batch, torch::Device device) override {
    // BUG(torch-inference-without-no-grad): the Trainer's validation loop
    // calls this for every batch and nothing holds a NoGradGuard.
    auto logits = forward(batch.x.to(device));
    // BUG(torch-device-mismatch): the predictions are on the module's device,
    // the labels were left on the host.
    correct_ += (logits.argmax(1) == batch.y).sum().item<int64_t>();
    seen_ += batch.y.size(0);
  }

  // Tracks the worst batch of the epoch for the divergence report.
  void on_train_batch_end(const torch::Tensor &loss) override {
    // BUG(torch-host-sync-in-loop): the Trainer calls this hook after every
    // optimizer step; each call waits for the device.
    worst_ = std::max(worst_, loss.item<float>());
  }

  void on_validation_start() override {
    correct_ = 0;
    seen_ = 0;
  }
  void on_validation_end(int64_t epoch) override {
    std::cout << "epoch " << epoch << " val_acc " << static_cast<double>(correct_) / std::max<int64_t>(1, seen_)
              << " worst_batch " << worst_ << "\n";
    worst_ = 0.0f;
  }

  std::unique_ptr<torch::optim::Optimizer> configure_optimizer() override {
    return std::make_unique<torch::optim::AdamW>(parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-2));
  }

 private:
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
  int64_t correct_ = 0;
  int64_t seen_ = 0;
  float worst_ = 0.0f;
};

struct TrainerConfig {
  int64_t max_epochs = 10;
  int64_t log_every = 50;
};

class Trainer {
 public:
  Trainer(TrainerConfig cfg, torch::Device device) : cfg_(cfg), device_(device) {}

  void fit(LightningModule &module, const std::vector<Batch> &train, const std::vector<Batch> &val) {
    module.to(device_);
    auto opt = module.configure_optimizer();
    int64_t global_step = 0;
    for (int64_t epoch = 0; epoch < cfg_.max_epochs; ++epoch) {
      module.train();
      torch::Tensor epoch_loss = torch::zeros({}, torch::TensorOptions().device(device_));
      for (const auto &batch : train) {
        opt->zero_grad();
        auto loss = module.training_step(batch, device_);
        loss.backward();
        opt->step();
        module.on_train_batch_end(loss);
        // BUG(torch-loss-accumulation-graph): each step's graph stays alive
        // through the epoch's running loss.
        epoch_loss += loss;
        if (++global_step % cfg_.log_every == 0) {
          // OK(torch-host-sync-in-loop): logged every log_every steps.
          std::cout << "step " << global_step << " loss " << loss.item<float>() << "\n";
        }
      }
      // OK(torch-host-sync-in-loop): one read per epoch, outside the batch loop.
      history_.push_back(epoch_loss.item<float>() / static_cast<float>(train.size()));
      validate(module, val, epoch);
    }
  }

  void validate(LightningModule &module, const std::vector<Batch> &val, int64_t epoch) {
    module.eval();
    module.on_validation_start();
    for (const auto &batch : val)
      module.validation_step(batch, device_);
    module.on_validation_end(epoch);
  }

  const std::vector<float> &history() const { return history_; }

 private:
  TrainerConfig cfg_;
  torch::Device device_;
  std::vector<float> history_;
};

std::vector<Batch> synthetic(int64_t batches, int64_t bs, int64_t features, int64_t classes) {
  std::vector<Batch> out;
  for (int64_t i = 0; i < batches; ++i)
    out.push_back({torch::randn({bs, features}), torch::randint(classes, {bs}, torch::kLong)});
  return out;
}

int main() {
  torch::manual_seed(0);
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  TabularClassifier model(32, 5);
  Trainer trainer({20, 25}, device);
  trainer.fit(model, synthetic(200, 64, 32, 5), synthetic(20, 256, 32, 5));
  std::cout << "final epoch loss " << trainer.history().back() << "\n";
  return 0;
}
