// Wildfire spread nowcasting for a regional fire-weather desk. A small
// convolutional cellular model predicts, from the current burning mask, the
// fuel / moisture / slope rasters and the 10 m wind field, which 250 m cells
// will burn one hour later. It is trained on simulated fires, then rolled
// out hour by hour with perturbed winds on every visible GPU (a small
// ensemble). The coarse NWP winds are downscaled to the fire grid by a
// TorchScript model that the meteorology team exports from Python.
#include <torch/script.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fire {

constexpr int64_t kGrid = 64;
constexpr int64_t kCoarse = 16;
constexpr int64_t kStatic = 3;                // fuel load, fuel moisture, slope
constexpr int64_t kInputs = 1 + kStatic + 2;  // burning mask, statics, wind u/v

struct Config {
  torch::Device device = torch::kCPU;
  int64_t steps = 1500;
  int64_t batch = 16;
  double lr = 1e-3;
  int64_t rollout_hours = 12;
  std::string downscaler_path = "wind_downscaler.pt";
};

struct SpreadNetImpl : torch::nn::Module {
  SpreadNetImpl()
      : body(register_module(
            "body", torch::nn::Sequential(
                        torch::nn::Conv2d(torch::nn::Conv2dOptions(kInputs, 32, 3).padding(1)),
                        torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                        torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 32, 3).padding(2).dilation(2)),
                        torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                        torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 1, 1))))) {}
  // [B, kInputs, G, G] -> logits of "burning in an hour" [B, 1, G, G]
  torch::Tensor forward(const torch::Tensor &x) { return body->forward(x); }
  torch::nn::Sequential body;
};
TORCH_MODULE(SpreadNet);

struct Scene {
  torch::Tensor statics;  // [B, kStatic, G, G]
  torch::Tensor burning;  // [B, 1, G, G], 0/1
  torch::Tensor wind;     // [B, 2, G, G], m/s
  torch::Tensor next;     // [B, 1, G, G], burning one hour later
};

// Toy fire physics on the host: fire reaches its neighbours, faster on dry
// fuel and upslope, and jumps a cell downwind in strong wind.
Scene simulate_scene(int64_t batch, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  Scene s;
  auto fuel = torch::avg_pool2d(torch::rand({batch, 1, kGrid, kGrid}, gen), 5, 1, 2);
  auto moisture = 0.3 * torch::rand({batch, 1, 1, 1}, gen) + 0.05 * torch::rand({batch, 1, kGrid, kGrid}, gen);
  auto slope = torch::linspace(0, 1, kGrid).view({1, 1, 1, kGrid}) * torch::rand({batch, 1, 1, 1}, gen);
  s.statics = torch::cat({fuel, moisture, slope.expand({batch, 1, kGrid, kGrid})}, 1);
  s.wind = (4.0 * torch::randn({batch, 2, 1, 1}, gen)).expand({batch, 2, kGrid, kGrid}).contiguous();
  s.burning = torch::zeros({batch, 1, kGrid, kGrid});
  auto ignition = torch::randint(8, kGrid - 8, {batch, 2}, gen);
  auto ig = ignition.accessor<int64_t, 2>();
  for (int64_t b = 0; b < batch; ++b)
    s.burning[b].narrow(1, ig[b][0], 3).narrow(2, ig[b][1], 3).fill_(1.0);
  auto reach = torch::max_pool2d(s.burning, 3, 1, 1);
  auto jump = torch::max_pool2d(reach, 3, 1, 1) * torch::sigmoid(s.wind.narrow(1, 0, 1) - 4.0);
  auto p = (reach + 0.5 * jump).clamp_max(1.0) * fuel * (1.0 - moisture).clamp_min(0.0) * (0.7 + 0.3 * slope);
  s.next = torch::maximum(s.burning, (torch::rand({batch, 1, kGrid, kGrid}, gen) < p).to(torch::kFloat));
  return s;
}

class Forecaster {
 public:
  explicit Forecaster(const Config &cfg) : device_(cfg.device) { net_->to(device_); }
  const torch::Device &device() const { return device_; }
  SpreadNet &net() { return net_; }

 private:
  torch::Device device_;
  SpreadNet net_;
};

void train(Forecaster &fc, const Config &cfg) {
  auto &net = fc.net();
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(cfg.lr));
  // Burning cells are rare; weight them up.
  auto pos_weight = torch::full({1}, 8.0, torch::TensorOptions().device(fc.device()));
  for (int64_t step = 0; step < cfg.steps; ++step) {
    Scene s = simulate_scene(cfg.batch, static_cast<uint64_t>(step));
    auto burning = s.burning.to(fc.device());
    auto statics = s.statics.to(fc.device());
    auto target = s.next.to(fc.device());
    // BUG(torch-device-mismatch): the wind channels are still the host
    // tensors of simulate_scene(); the other grids are on fc.device().
    auto x = torch::cat({burning, statics, s.wind}, 1);
    auto logits = net->forward(x);
    auto loss = torch::nn::functional::binary_cross_entropy_with_logits(
        logits, target, torch::nn::functional::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pos_weight));
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 100 == 0) {
      // OK(torch-host-sync-in-loop): one step in 100.
      std::cout << "step " << step << " loss " << loss.item<double>() << '\n';
    }
  }
}

// The met team's downscaler: coarse (16x16) u/v -> fire-grid (64x64) u/v.
class WindDownscaler {
 public:
  explicit WindDownscaler(const std::string &path) : device_(pick()), module_(torch::jit::load(path, device_)) {
    module_.eval();
  }

  torch::Tensor operator()(const torch::Tensor &coarse) {
    torch::NoGradGuard no_grad;
    // BUG(torch-device-mismatch): the coarse winds arrive on the host; the
    // scripted module was loaded onto device_.
    return module_.forward({coarse}).toTensor().to(torch::kCPU);
  }

 private:
  // The rollout keeps the first card busy; the downscaler gets the second.
  static torch::Device pick() {
    // BUG(torch-device-index-unchecked): is_available() says there is a GPU,
    // not that there are two.
    return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 1) : torch::Device(torch::kCPU);
  }

  torch::Device device_;
  torch::jit::script::Module module_;
};

std::vector<torch::Device> rollout_devices() {
  std::vector<torch::Device> out;
  for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i) {
    // OK(torch-device-index-unchecked, torch-cuda-unguarded): one device per
    // index below device_count().
    out.emplace_back("cuda:" + std::to_string(i));
  }
  if (out.empty())
    out.emplace_back(torch::kCPU);
  return out;
}

torch::Tensor rollout(SpreadNet &net, const torch::Device &dev, const Scene &start, const torch::Tensor &wind,
                      int64_t hours) {
  torch::NoGradGuard no_grad;
  auto statics = start.statics.to(dev);
  auto w = wind.to(dev);
  auto burning = start.burning.to(dev);
  for (int64_t h = 0; h < hours; ++h) {
    // OK(torch-device-mismatch, torch-eval-mode-missing): every input is on
    // dev, where main() moved the member, and main() called eval().
    auto p = torch::sigmoid(net->forward(torch::cat({burning, statics, w}, 1)));
    burning = torch::maximum(burning, (p > 0.5).to(torch::kFloat));
  }
  return burning.to(torch::kCPU);
}

// The field tablets run the model in half precision on their GPU; the smoke
// test runs there too.
void export_half(SpreadNet net, const std::string &path) {
  net->eval();
  // BUG(torch-cuda-unguarded): main() runs this hook on every machine,
  // without checking for CUDA.
  net->to(torch::Device(torch::kCUDA), torch::kHalf);
  torch::NoGradGuard no_grad;
  auto probe = torch::zeros({1, kInputs, kGrid, kGrid}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kHalf));
  if (!torch::isfinite(net->forward(probe)).all().item<bool>())
    throw std::runtime_error("half-precision export gives non-finite logits");
  torch::save(net, path);
}

}  // namespace fire

int main(int argc, char **argv) {
  using namespace fire;
  torch::manual_seed(193);
  Config cfg;
  if (argc > 1)
    cfg.steps = std::stoll(argv[1]);
  // OK(torch-cuda-unguarded): a CPU fallback on the other side.
  cfg.device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);

  Forecaster fc(cfg);
  train(fc, cfg);
  torch::save(fc.net(), "spread.pt");

  WindDownscaler downscaler(cfg.downscaler_path);
  auto coarse = 4.0 * torch::randn({1, 2, kCoarse, kCoarse});
  auto wind = downscaler(coarse);
  Scene start = simulate_scene(1, 424242);

  const auto devices = rollout_devices();
  std::vector<torch::Tensor> finals;
  for (size_t m = 0; m < 2 * devices.size(); ++m) {
    const torch::Device &dev = devices[m % devices.size()];
    SpreadNet member;
    torch::load(member, "spread.pt");
    member->to(dev);
    member->eval();
    auto perturbed = wind * (1.0 + 0.1 * torch::randn({1, 2, 1, 1}));
    finals.push_back(rollout(member, dev, start, perturbed, cfg.rollout_hours));
  }
  auto burn_prob = torch::stack(finals).mean(0);

  std::vector<std::function<void()>> after_run;
  after_run.push_back([&] { export_half(fc.net(), "spread_fp16.pt"); });
  after_run.push_back([&] {
    std::cout << "cells burning in " << cfg.rollout_hours << " h with p > 0.5: " << (burn_prob > 0.5).sum().item<int64_t>()
              << '\n';
  });
  for (auto &hook : after_run)
    hook();
  return 0;
}
