// Stochastic weight averaging (SWA) for a small regression MLP: after a
// warm-up phase with a cosine schedule, the learning rate is held constant
// and, at the end of every epoch, the current weights are folded into a
// running average kept by an SwaAverager. The averaged copy lives on the
// host (it is only evaluated at the end, and the training GPU is small). A
// step logger collects the learning-rate and loss curves.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <vector>

constexpr int64_t kIn = 24;
constexpr double kPi = 3.14159265358979323846;

struct RegressorImpl : torch::nn::Module {
  RegressorImpl()
      : l1(register_module("l1", torch::nn::Linear(kIn, 96))),
        l2(register_module("l2", torch::nn::Linear(96, 96))),
        l3(register_module("l3", torch::nn::Linear(96, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return l3->forward(torch::gelu(l2->forward(torch::gelu(l1->forward(x))))); }
  torch::nn::Linear l1, l2, l3;
};
TORCH_MODULE(Regressor);

struct Split {
  torch::Tensor x, y;
};

Split make_split(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  auto x = torch::randn({n, kIn});
  auto y = (x.sum(1, true) * 0.3).sin() + 0.05 * torch::randn({n, 1});
  return {x, y};
}

class SwaAverager {
 public:
  // The average starts as a host copy of the model's current weights.
  explicit SwaAverager(const Regressor &model) : avg_(std::dynamic_pointer_cast<RegressorImpl>(model->clone())) {
    avg_->to(torch::kCPU);
  }

  // Folds the model's current weights into the running average.
  void update(const Regressor &model) {
    torch::NoGradGuard no_grad;
    auto avg_params = avg_->parameters();
    auto cur_params = model->parameters();
    const double n = static_cast<double>(count_);
    for (size_t i = 0; i < avg_params.size(); ++i) {
      avg_params[i] *= n / (n + 1);
      avg_params[i] += cur_params[i] / (n + 1);
    }
    ++count_;
  }

  Regressor averaged() const { return Regressor(avg_); }

 private:
  std::shared_ptr<RegressorImpl> avg_;
  int64_t count_ = 1;
};

struct StepLog {
  std::vector<double> lr;
  std::vector<torch::Tensor> loss;
};

double cosine_lr(int64_t step, int64_t total, double base) {
  return 0.5 * base * (1.0 + std::cos(kPi * static_cast<double>(step) / static_cast<double>(total)));
}

void set_lr(torch::optim::SGD &opt, double lr) {
  for (auto &group : opt.param_groups())
    static_cast<torch::optim::SGDOptions &>(group.options()).lr(lr);
}

double mse(Regressor &model, const Split &split, torch::Device device, int64_t bs) {
  model->eval();
  double total = 0.0;
  const int64_t n = split.x.size(0);
  for (int64_t i = 0; i < n; i += bs) {
    auto x = split.x.slice(0, i, std::min(i + bs, n)).to(device);
    auto y = split.y.slice(0, i, std::min(i + bs, n)).to(device);
    // BUG(torch-inference-without-no-grad): evaluation only; no caller
    // holds a NoGradGuard and nothing here calls backward().
    auto pred = model->forward(x);
    total += torch::mse_loss(pred, y, torch::Reduction::Sum).item<double>();
  }
  return total / static_cast<double>(n);
}

int main() {
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  const auto train = make_split(8192, 1);
  const auto val = make_split(1024, 2);
  Regressor model;
  model->to(device);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  const int64_t epochs = 40, swa_start = 25, bs = 128;
  const int64_t steps_per_epoch = train.x.size(0) / bs;
  std::unique_ptr<SwaAverager> swa;
  StepLog log;
  int64_t step = 0;

  auto record = [&log](double lr, const torch::Tensor &loss) {
    log.lr.push_back(lr);
    // BUG(torch-loss-accumulation-graph): the logger keeps the loss tensor
    // itself, and with it every step's graph.
    log.loss.push_back(loss);
  };

  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    model->train();
    auto perm = torch::randperm(train.x.size(0));
    for (int64_t b = 0; b < steps_per_epoch; ++b) {
      auto idx = perm.slice(0, b * bs, (b + 1) * bs);
      auto x = train.x.index_select(0, idx).to(device);
      auto y = train.y.index_select(0, idx).to(device);
      const double lr = epoch < swa_start ? cosine_lr(step, swa_start * steps_per_epoch, 0.05) : 0.01;
      set_lr(opt, lr);
      opt.zero_grad();
      auto loss = torch::mse_loss(model->forward(x), y);
      loss.backward();
      opt.step();
      record(lr, loss);
      ++step;
      // BUG(torch-host-sync-in-loop): a NaN check on every step stalls the
      // device queue.
      if (std::isnan(loss.item<double>())) {
        std::cerr << "diverged at step " << step << "\n";
        return 1;
      }
    }
    if (epoch >= swa_start) {
      if (!swa) {
        swa = std::make_unique<SwaAverager>(model);
      } else {
        // BUG(torch-device-mismatch): update() adds the live parameters (on
        // 'device') into the averaged copy, which the constructor moved to
        // the host.
        swa->update(model);
      }
    }
    if (epoch % 5 == 0) {
      std::cout << "epoch " << epoch << " val_mse " << mse(model, val, device, 256) << "\n";
    }
  }

  auto averaged = swa->averaged();
  // OK(torch-device-mismatch): the averaged model and its inputs are on the host.
  std::cout << "swa val_mse " << mse(averaged, val, torch::kCPU, 256) << " last val_mse "
            << mse(model, val, device, 256) << "\n";
  return 0;
}
