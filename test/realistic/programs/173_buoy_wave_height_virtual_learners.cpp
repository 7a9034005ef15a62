// Significant wave height forecaster for a line of offshore buoys: 48 hourly
// readings of (height, period, wind speed, pressure) in, the next 6 hours of
// height out. Two learners share a base class whose fit() owns the epoch and
// batch loops, the NaN screening of buoy dropouts and early stopping; each
// learner implements train_step() / eval_step() and manages its own
// network's mode. The harbour office compares the two every night and keeps
// the better one.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace nn = torch::nn;

constexpr int64_t kHistory = 48, kFeatures = 4, kHorizon = 6;

struct BuoyBatch {
  torch::Tensor history;  // [B, 48, 4]
  torch::Tensor target;   // [B, 6]
};

std::vector<BuoyBatch> buoy_batches(int64_t n, int64_t batch, torch::Device device, bool with_dropouts) {
  std::vector<BuoyBatch> out;
  auto t = torch::arange(kHistory + kHorizon, device).to(torch::kFloat);
  for (int64_t i = 0; i < n; ++i) {
    auto phase = torch::rand({batch, 1}, device) * 6.28;
    auto swell = 1.5 + torch::sin(t.unsqueeze(0) / 7.0 + phase);  // [B, 54]
    auto feats = torch::stack({swell.narrow(1, 0, kHistory), 8 + swell.narrow(1, 0, kHistory),
                               torch::randn({batch, kHistory}, device), torch::randn({batch, kHistory}, device)},
                              2);
    auto target = swell.narrow(1, kHistory, kHorizon);
    if (with_dropouts && i % 17 == 3)
      target = target.clone().fill_(std::numeric_limits<float>::quiet_NaN());  // sensor outage
    out.push_back({feats, target});
  }
  return out;
}

class Learner {
 public:
  virtual ~Learner() = default;
  virtual std::string name() const = 0;
  virtual torch::Tensor train_step(const BuoyBatch& b) = 0;
  virtual torch::Tensor eval_step(const BuoyBatch& b) = 0;

  double fit(const std::vector<BuoyBatch>& train, const std::vector<BuoyBatch>& val, int64_t epochs,
             int64_t patience) {
    double best = std::numeric_limits<double>::infinity();
    int64_t stale = 0;
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      for (const auto& b : train) {
        // BUG(torch-host-sync-in-loop): the outage screen reads a device
        // bool on every training batch before train_step() runs.
        if (torch::isnan(b.target).any().item<bool>())
          continue;
        train_step(b);
      }
      const double val_mse = validate(val);
      std::cout << name() << " epoch " << epoch << " val mse " << val_mse << '\n';
      if (val_mse < best) {
        best = val_mse;
        stale = 0;
      } else if (++stale >= patience) {
        break;
      }
    }
    return best;
  }

  double validate(const std::vector<BuoyBatch>& val) {
    torch::NoGradGuard no_grad;
    double total = 0;
    for (const auto& b : val)
      total += eval_step(b).item<double>();
    return total / static_cast<double>(val.size());
  }
};

struct MlpForecasterImpl : nn::Module {
  MlpForecasterImpl()
      : body(register_module("body", nn::Sequential(nn::Flatten(), nn::Linear(kHistory * kFeatures, 256), nn::ReLU(),
                                                    nn::Dropout(0.2), nn::Linear(256, kHorizon)))) {}
  torch::Tensor forward(const torch::Tensor& x) { return body->forward(x); }
  nn::Sequential body;
};
TORCH_MODULE(MlpForecaster);

// A per-hour residual on top of persistence (the last observed height).
struct ResidualForecasterImpl : nn::Module {
  ResidualForecasterImpl()
      : proj(register_module("proj", nn::Linear(kFeatures, 32))),
        norm(register_module("norm", nn::BatchNorm1d(32))),
        drop(register_module("drop", nn::Dropout(0.1))),
        out(register_module("out", nn::Linear(32 * kHistory, kHorizon))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(norm(proj(x).transpose(1, 2))).flatten(1);
    auto last = x.select(1, kHistory - 1).select(1, 0).unsqueeze(1);
    return last + out(drop(h));
  }
  nn::Linear proj;
  nn::BatchNorm1d norm;
  nn::Dropout drop;
  nn::Linear out;
};
TORCH_MODULE(ResidualForecaster);

class MlpLearner : public Learner {
 public:
  explicit MlpLearner(torch::Device device) : opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)) {
    net_->to(device);
  }
  std::string name() const override { return "mlp"; }

  torch::Tensor train_step(const BuoyBatch& b) override {
    net_->train();
    opt_.zero_grad();
    auto loss = torch::mse_loss(net_->forward(b.history), b.target);
    loss.backward();
    // OK(torch-missing-zero-grad): zero_grad() before every backward.
    opt_.step();
    return loss.detach();
  }

  torch::Tensor eval_step(const BuoyBatch& b) override {
    net_->eval();
    // OK(torch-eval-mode-missing): eval() right above.
    return torch::mse_loss(net_->forward(b.history), b.target);
  }

 private:
  MlpForecaster net_;
  torch::optim::Adam opt_;
};

class ResidualLearner : public Learner {
 public:
  explicit ResidualLearner(torch::Device device)
      : opt_(net_->parameters(), torch::optim::SGDOptions(5e-3).momentum(0.9).nesterov(true)) {
    net_->to(device);
  }
  std::string name() const override { return "residual"; }

  torch::Tensor train_step(const BuoyBatch& b) override {
    net_->train();
    auto loss = torch::smooth_l1_loss(net_->forward(b.history), b.target);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(net_->parameters(), 1.0);
    // BUG(torch-missing-zero-grad): this learner never resets its gradients;
    // each step re-applies every earlier batch's gradient.
    opt_.step();
    return loss.detach();
  }

  torch::Tensor eval_step(const BuoyBatch& b) override {
    // BUG(torch-eval-mode-missing): train_step() left the network in train();
    // validate() runs this under its NoGradGuard with BatchNorm and Dropout
    // still in training mode.
    return torch::mse_loss(net_->forward(b.history), b.target);
  }

 private:
  ResidualForecaster net_;
  torch::optim::SGD opt_;
};

int main() {
  torch::manual_seed(173);
  torch::Device device(torch::kCPU);
  if (torch::cuda::is_available())
    device = torch::Device(torch::kCUDA);

  auto train = buoy_batches(200, 32, device, /*with_dropouts=*/true);
  auto val = buoy_batches(20, 64, device, /*with_dropouts=*/false);

  std::vector<std::unique_ptr<Learner>> learners;
  learners.push_back(std::make_unique<MlpLearner>(device));
  learners.push_back(std::make_unique<ResidualLearner>(device));

  std::string winner;
  double best = std::numeric_limits<double>::infinity();
  for (auto& learner : learners) {
    const double mse = learner->fit(train, val, 40, 5);
    if (mse < best) {
      best = mse;
      winner = learner->name();
    }
  }
  std::cout << "tonight's forecaster: " << winner << " (val mse " << best << ")\n";
}
