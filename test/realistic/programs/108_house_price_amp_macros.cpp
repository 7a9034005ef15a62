// Predicts house prices from ten tabular features with a plain MLP (no
// Dropout, no BatchNorm). The project builds against LibTorch 1.13 and 2.x,
// so its CUDA autocast switches are macros that pick each version's
// spelling. After training it refits the output layer on recent listings
// (the market drifted) and serves a price quote.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>

#if TORCH_VERSION_MAJOR >= 2
#define HP_AUTOCAST_ON() at::autocast::set_autocast_enabled(at::kCUDA, true)
#define HP_AUTOCAST_OFF() at::autocast::set_autocast_enabled(at::kCUDA, false)
#else
#define HP_AUTOCAST_ON() at::autocast::set_enabled(true)
#define HP_AUTOCAST_OFF() at::autocast::set_enabled(false)
#endif

constexpr int64_t kFeatures = 10;

struct PriceNetImpl : torch::nn::Module {
  PriceNetImpl()
      : body(register_module("body", torch::nn::Sequential(torch::nn::Linear(kFeatures, 64), torch::nn::ReLU(),
                                                           torch::nn::Linear(64, 64), torch::nn::ReLU()))),
        out(register_module("out", torch::nn::Linear(64, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return out(body->forward(x)).squeeze(1); }
  torch::nn::Sequential body;
  torch::nn::Linear out;
};
TORCH_MODULE(PriceNet);

struct Listings {
  torch::Tensor x, y;
  int64_t size() const { return x.size(0); }
};

// Prices in units of 100k; `drift` inflates the whole market.
Listings synth_listings(int64_t n, torch::Device device, double drift) {
  auto x = torch::randn({n, kFeatures}, device);
  auto w = torch::linspace(0.5, 1.5, kFeatures, torch::TensorOptions().device(device));
  auto y = (x * w).sum(1) * (1.0 + drift) + 3.0 + 0.1 * torch::randn({n}, device);
  return {x, y};
}

torch::Tensor train_epoch(PriceNet &net, torch::optim::Optimizer &opt, const Listings &data, int64_t batch) {
  torch::nn::MSELoss criterion;
  auto total = torch::zeros({}, data.x.options());
  auto perm = torch::randperm(data.size(), data.x.options().dtype(torch::kLong));
  int64_t batches = 0;
  for (int64_t start = 0; start + batch <= data.size(); start += batch) {
    auto idx = perm.narrow(0, start, batch);
    opt.zero_grad();
    HP_AUTOCAST_ON();
    auto pred = net->forward(data.x.index_select(0, idx));
    auto loss = criterion(pred, data.y.index_select(0, idx));
    // BUG(torch-autocast-region): backward() runs while autocast is still
    // enabled (and on an unscaled float16 loss); PyTorch runs backward
    // outside autocast.
    loss.backward();
    HP_AUTOCAST_OFF();
    // OK(torch-missing-zero-grad): zero_grad() at the top of each batch.
    opt.step();
    total += loss.detach();
    ++batches;
  }
  return total / batches;
}

double validate_rmse(PriceNet &net, const Listings &val) {
  torch::NoGradGuard no_grad;
  double squared = 0;
  // OK(torch-autocast-region): no exit between the two switches.
  HP_AUTOCAST_ON();
  for (int64_t start = 0; start < val.size(); start += 512) {
    const int64_t n = std::min<int64_t>(512, val.size() - start);
    // OK(torch-eval-mode-missing): no Dropout or BatchNorm, eval() changes nothing.
    auto pred = net->forward(val.x.narrow(0, start, n)).to(torch::kFloat);
    squared += (pred - val.y.narrow(0, start, n)).pow(2).sum().item<double>();
  }
  HP_AUTOCAST_OFF();
  return std::sqrt(squared / static_cast<double>(val.size()));
}

// Refits the output layer on recent listings after the market drifted.
void recalibrate_head(PriceNet &net, const Listings &recent, int iters) {
  torch::optim::SGD opt(net->out->parameters(), torch::optim::SGDOptions(1e-3));
  opt.zero_grad();
  for (int it = 0; it < iters; ++it) {
    auto loss = torch::nn::functional::mse_loss(net->forward(recent.x), recent.y);
    loss.backward();
    // BUG(torch-missing-zero-grad): zero_grad() runs once, before the loop,
    // so each step applies the sum of all earlier iterations' gradients.
    opt.step();
  }
}

// Serves a quote; `cap` <= 0 means that no price cap is configured.
torch::Tensor predict_prices(PriceNet &net, const torch::Tensor &features, double cap) {
  torch::NoGradGuard no_grad;
  // BUG(torch-autocast-region): the early return for an uncapped request
  // skips HP_AUTOCAST_OFF(), so the rest of the thread runs under autocast.
  HP_AUTOCAST_ON();
  // OK(torch-eval-mode-missing): no Dropout or BatchNorm.
  auto pred = net->forward(features).to(torch::kFloat);
  if (cap <= 0)
    return pred;
  pred = pred.clamp_max(cap);
  HP_AUTOCAST_OFF();
  return pred;
}

int main(int argc, char **argv) {
  torch::manual_seed(5);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  PriceNet net;
  net->to(device);
  auto train = synth_listings(8192, device, 0.0);
  auto val = synth_listings(1024, device, 0.0);

  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  for (int epoch = 0; epoch < 20; ++epoch) {
    auto epoch_mse = train_epoch(net, opt, train, 128);
    if (epoch % 5 == 4)
      std::cout << "epoch " << epoch << " mse " << epoch_mse.item<float>() << " val rmse "
                << validate_rmse(net, val) << '\n';
  }

  recalibrate_head(net, synth_listings(256, device, 0.08), 100);
  std::cout << "after recalibration rmse " << validate_rmse(net, synth_listings(1024, device, 0.08)) << '\n';
  const double cap = argc > 1 ? std::stod(argv[1]) : 0.0;
  auto quote = predict_prices(net, synth_listings(4, device, 0.08).x, cap);
  std::cout << "quotes (100k) " << quote.cpu() << '\n';
}
