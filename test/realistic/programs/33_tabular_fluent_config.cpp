// Tabular regression (house prices, synthetic here) configured through a
// fluent builder. The builder keeps the device as a std::optional that falls
// back to the CPU; the table is a struct built by a static factory from
// row-major host buffers; training walks it in contiguous slices.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

class RunConfig {
 public:
  RunConfig &on(torch::Device d) {
    device_ = d;
    return *this;
  }
  RunConfig &gpu() {
    // BUG(torch-cuda-unguarded): main() calls gpu() for --gpu without ever
    // asking whether CUDA is there.
    device_ = torch::Device(torch::kCUDA);
    return *this;
  }
  RunConfig &gpu_if_available() {
    if (torch::cuda::is_available()) {
      // OK(torch-cuda-unguarded): checked just above.
      device_ = torch::Device(torch::kCUDA);
    }
    return *this;
  }
  RunConfig &batch(int64_t b) {
    batch_ = b;
    return *this;
  }
  RunConfig &epochs(int64_t e) {
    epochs_ = e;
    return *this;
  }
  RunConfig &lr(double v) {
    lr_ = v;
    return *this;
  }

  torch::Device device() const { return device_.value_or(torch::Device(torch::kCPU)); }
  int64_t batch() const { return batch_; }
  int64_t epochs() const { return epochs_; }
  double lr() const { return lr_; }

 private:
  std::optional<torch::Device> device_;
  int64_t batch_ = 128;
  int64_t epochs_ = 10;
  double lr_ = 1e-3;
};

struct Table {
  torch::Tensor features;
  torch::Tensor target;

  static Table synthetic(int64_t rows, int64_t cols, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (auto &v : x)
      v = normal(rng);
    Table t;
    t.features = torch::from_blob(x.data(), {rows, cols}, torch::kFloat).clone();
    t.target = (t.features.narrow(1, 0, 3).sum(1, true) + 0.1 * torch::randn({rows, 1})).clone();
    return t;
  }
  int64_t rows() const { return features.size(0); }
};

struct RegressorImpl : torch::nn::Module {
  explicit RegressorImpl(int64_t cols)
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(cols, 128), torch::nn::ReLU(),
                                                         torch::nn::Linear(128, 64), torch::nn::ReLU(),
                                                         torch::nn::Linear(64, 1)))) {}
  torch::Tensor forward(torch::Tensor x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Regressor);

Regressor build_model(const RunConfig &cfg, int64_t cols) {
  Regressor model(cols);
  model->to(cfg.device());
  return model;
}

torch::Tensor fit(Regressor model, const RunConfig &cfg, const Table &table) {
  const torch::Device device = cfg.device();
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(cfg.lr()));
  auto smoothed = torch::zeros({}, device);
  torch::Tensor target = table.target;
  if (device.is_cuda())
    target = target.pin_memory();
  for (int64_t epoch = 0; epoch < cfg.epochs(); ++epoch) {
    for (int64_t start = 0; start + cfg.batch() <= table.rows(); start += cfg.batch()) {
      // BUG(torch-non-blocking-pageable): the features come from from_blob()
      // and clone(), pageable host memory; the copy is synchronous.
      auto x = table.features.slice(0, start, start + cfg.batch()).to(device, /*non_blocking=*/true);
      // OK(torch-non-blocking-pageable): the targets were pinned when the
      // device is a GPU; on the CPU there is no host-to-device copy.
      auto y = target.slice(0, start, start + cfg.batch()).to(device, /*non_blocking=*/true);
      // OK(torch-device-mismatch): build_model() moved the model with the
      // same cfg.device() the batch was moved with.
      auto pred = model->forward(x);
      auto loss = torch::mse_loss(pred, y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): the running average lives across
      // epochs and chains every step's graph into the next.
      smoothed = 0.98 * smoothed + 0.02 * loss;
    }
  }
  return smoothed;
}

double validate(Regressor model, const RunConfig &cfg, const Table &table) {
  torch::NoGradGuard no_grad;
  auto pred = model->forward(table.features.to(cfg.device()));
  return torch::mse_loss(pred, table.target.to(cfg.device())).item<double>();
}

int main(int argc, char **argv) {
  const bool force_gpu = argc > 1 && std::string(argv[1]) == "--gpu";
  RunConfig cfg;
  cfg.batch(256).epochs(30).lr(3e-3);
  if (force_gpu)
    cfg.gpu();
  else
    cfg.gpu_if_available();

  auto train = Table::synthetic(20000, 24, 1);
  auto valid = Table::synthetic(4000, 24, 2);
  auto model = build_model(cfg, 24);
  auto smoothed = fit(model, cfg, train);
  std::cout << "final smoothed loss " << smoothed.item<double>() << '\n';
  std::cout << "validation mse " << validate(model, cfg, valid) << '\n';

  // A shadow run validates on the second GPU while the first trains the next
  // fold.
  RunConfig shadow = cfg;
  if (torch::cuda::is_available()) {
    // BUG(torch-device-index-unchecked): ordinal 1 is never compared with
    // device_count(); with CUDA_VISIBLE_DEVICES=0 there is no cuda:1.
    shadow.on(torch::Device("cuda:1"));
    auto shadow_model = build_model(shadow, 24);
    std::cout << "shadow validation mse " << validate(shadow_model, shadow, valid) << '\n';
  }
  return 0;
}
