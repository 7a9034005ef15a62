// An MNIST-style classifier trainer: a config struct, a synthetic dataset,
// a model with submodules, a Trainer class and an evaluation pass.
// The device lives in a namespace-scope variable that every file of the
// "project" reads.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

namespace runtime {
// OK(torch-cuda-unguarded): chosen by a guarded ternary.
const torch::Device kDevice(torch::cuda::is_available() ? torch::kCUDA
                                                         : torch::kCPU);
}  // namespace runtime

struct Config {
  int64_t epochs = 3;
  int64_t batch_size = 64;
  int64_t log_every = 50;
  double lr = 1e-3;
  std::string checkpoint = "classifier.pt";
};

struct Batch {
  torch::Tensor images;
  torch::Tensor labels;
};

class SyntheticDigits {
 public:
  SyntheticDigits(int64_t n, int64_t batch_size) : n_(n), batch_size_(batch_size) {}

  std::vector<Batch> batches() const {
    std::vector<Batch> out;
    for (int64_t start = 0; start < n_; start += batch_size_) {
      out.push_back({torch::randn({batch_size_, 1, 28, 28}),
                     torch::randint(0, 10, {batch_size_}, torch::kLong)});
    }
    return out;
  }

 private:
  int64_t n_;
  int64_t batch_size_;
};

struct ClassifierImpl : torch::nn::Module {
  ClassifierImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        head(register_module("head", torch::nn::Linear(32 * 7 * 7, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return head(x.flatten(1));
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear head;
};
TORCH_MODULE(Classifier);

class Trainer {
 public:
  explicit Trainer(const Config &cfg)
      : cfg_(cfg), optimizer_(model_->parameters(), torch::optim::AdamOptions(cfg.lr)) {
    model_->to(runtime::kDevice);
  }

  // Called once per training step by fit().
  void record(const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): fit() calls record() on every step, and
    // loss lives on runtime::kDevice: one host sync per step.
    running_ += loss.item<double>();
    ++seen_;
  }

  void fit(const std::vector<Batch> &data) {
    model_->train();
    for (int64_t epoch = 0; epoch < cfg_.epochs; ++epoch) {
      int64_t step = 0;
      auto epoch_loss = torch::zeros({}, runtime::kDevice);
      for (const auto &batch : data) {
        auto images = batch.images.to(runtime::kDevice);
        auto labels = batch.labels.to(runtime::kDevice);
        optimizer_.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(model_->forward(images), labels);
        loss.backward();
        optimizer_.step();
        record(loss);
        // OK(torch-loss-accumulation-graph): detached, summed on the device.
        epoch_loss += loss.detach();
        if (++step % cfg_.log_every == 0) {
          // OK(torch-host-sync-in-loop): read every log_every steps only.
          std::cout << "epoch " << epoch << " step " << step << " loss "
                    << (epoch_loss / step).item<double>() << '\n';
        }
      }
    }
  }

  double evaluate(const std::vector<Batch> &data) {
    model_->eval();
    torch::NoGradGuard no_grad;
    int64_t correct = 0, total = 0;
    for (const auto &batch : data) {
      auto logits = model_->forward(batch.images.to(runtime::kDevice));
      correct += logits.argmax(1).eq(batch.labels.to(runtime::kDevice)).sum().item<int64_t>();
      total += batch.labels.size(0);
    }
    return total == 0 ? 0.0 : static_cast<double>(correct) / total;
  }

  // A smoke test run before training: one forward on a fixed probe.
  void smoke_test() {
    torch::NoGradGuard no_grad;
    auto probe = torch::randn({2, 1, 28, 28});
    // BUG(torch-device-mismatch): the model was moved to runtime::kDevice in
    // the constructor, the probe is a CPU factory result.
    auto out = model_->forward(probe);
    std::cout << "smoke test logits " << out.sizes() << '\n';
  }

  double mean_loss() const { return seen_ == 0 ? 0.0 : running_ / seen_; }
  Classifier &model() { return model_; }

 private:
  Config cfg_;
  Classifier model_;
  torch::optim::Adam optimizer_;
  double running_ = 0;
  int64_t seen_ = 0;
};

int main() {
  torch::manual_seed(0);
  Config cfg;
  SyntheticDigits train_set(2048, cfg.batch_size), val_set(512, cfg.batch_size);
  Trainer trainer(cfg);
  trainer.smoke_test();
  trainer.fit(train_set.batches());
  std::cout << "mean loss " << trainer.mean_loss() << '\n';
  std::cout << "val accuracy " << trainer.evaluate(val_set.batches()) << '\n';
  torch::save(trainer.model(), cfg.checkpoint);
  return 0;
}
