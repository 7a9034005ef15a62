// Nowcasts a photovoltaic plant's output from its last 24 readings (an MLP
// with Dropout). Built against LibTorch 1.13 and 2.x, so the CUDA autocast
// switches sit in two helpers and an RAII scope with version #ifs. Training
// runs in float16 with a hand-written loss scale (the weather adaptation
// forgot it), the head refit in bfloat16; serving rolls the forecast out.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

constexpr int64_t kWindow = 24;
constexpr double kPi = 3.14159265358979323846;

#if TORCH_VERSION_MAJOR >= 2
void amp_on() { at::autocast::set_autocast_enabled(at::kCUDA, true); }
void amp_off() { at::autocast::set_autocast_enabled(at::kCUDA, false); }
#else
void amp_on() { at::autocast::set_enabled(true); }
void amp_off() { at::autocast::set_enabled(false); }
#endif

// Switches CUDA autocast to bfloat16 for its scope; restores dtype and state.
class Bf16Autocast {
  bool was_on_ = false;
  at::ScalarType old_dtype_ = at::kHalf;

public:
  Bf16Autocast() {
#if TORCH_VERSION_MAJOR >= 2
    was_on_ = at::autocast::is_autocast_enabled(at::kCUDA);
    old_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    // OK(torch-autocast-region): RAII; the destructor restores the saved state.
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    was_on_ = at::autocast::is_enabled();
    old_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    // OK(torch-autocast-region): RAII; the destructor restores the saved state.
    at::autocast::set_enabled(true);
#endif
  }
  ~Bf16Autocast() {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(at::kCUDA, was_on_);
    at::autocast::set_autocast_dtype(at::kCUDA, old_dtype_);
#else
    at::autocast::set_enabled(was_on_);
    at::autocast::set_autocast_gpu_dtype(old_dtype_);
#endif
  }
};

struct PvNetImpl : torch::nn::Module {
  PvNetImpl()
      : body(register_module("body", torch::nn::Sequential(torch::nn::Linear(kWindow, 128), torch::nn::GELU(),
                                                           torch::nn::Dropout(0.1), torch::nn::Linear(128, 64),
                                                           torch::nn::GELU()))),
        out(register_module("out", torch::nn::Linear(64, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return out(body->forward(x)); }
  torch::nn::Sequential body;
  torch::nn::Linear out;
};
TORCH_MODULE(PvNet);

struct Series { torch::Tensor x, y; };  // a window of readings and the next one

// A clear-sky daily curve sampled every 15 minutes, dimmed by passing clouds.
std::vector<Series> synth_series(int64_t batches, int64_t n, double cloudiness, torch::Device device) {
  std::vector<Series> out;
  auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto steps = torch::arange(kWindow + 1, opts).unsqueeze(0) * (kPi / 48.0);
  for (int64_t b = 0; b < batches; ++b) {
    auto phase = torch::rand({n, 1}, device) * kPi;
    auto curve = torch::sin(phase + steps).clamp_min(0) * (1 - cloudiness * torch::rand({n, kWindow + 1}, device));
    out.push_back({curve.narrow(1, 0, kWindow), curve.narrow(1, kWindow, 1)});
  }
  return out;
}

void unscale(PvNet &model, double scale) {
  for (auto &p : model->parameters())
    p.grad().div_(scale);
}

void pretrain(PvNet &model, const std::vector<Series> &data, bool amp, double scale, int epochs) {
  model->train();
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3));
  for (int epoch = 0; epoch < epochs; ++epoch)
    for (const auto &s : data) {
      opt.zero_grad();
      if (amp)
        amp_on();
      auto loss = torch::mse_loss(model->forward(s.x), s.y);
      if (amp)
        amp_off();
      // OK(torch-autocast-region): opened and closed under the same
      // condition, and the loss is scaled before backward().
      (loss * scale).backward();
      unscale(model, scale);
      opt.step();
    }
}

void finetune_site(PvNet &model, const std::vector<Series> &site, double scale) {
  model->train();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  auto backprop = [scale](const torch::Tensor &loss) {
    // BUG(torch-autocast-region): the loop calls this before amp_off(), so
    // the backward pass runs inside the autocast region.
    (loss * scale).backward();
  };
  for (const auto &s : site) {
    opt.zero_grad();
    amp_on();
    auto loss = torch::mse_loss(model->forward(s.x), s.y);
    backprop(loss);
    amp_off();
    unscale(model, scale);
    opt.step();
  }
}

void adapt_to_weather(PvNet &model, const std::vector<Series> &cloudy) {
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(3e-4));
  for (const auto &s : cloudy) {
    opt.zero_grad();
    amp_on();
    auto loss = torch::l1_loss(model->forward(s.x), s.y);
    amp_off();
    // BUG(torch-autocast-region): a mean loss from a float16 region (no
    // dtype was chosen) reaches backward() with no loss scale.
    loss.backward();
    opt.step();
  }
}

torch::Tensor bf16_loss(PvNet &model, const Series &s) {
  Bf16Autocast amp;
  return torch::mse_loss(model->forward(s.x), s.y);
}

void refit_head_bf16(PvNet &model, const std::vector<Series> &recent) {
  model->train();
  torch::optim::Adam opt(model->out->parameters(), torch::optim::AdamOptions(1e-3));
  for (const auto &s : recent) {
    opt.zero_grad();
    auto loss = bf16_loss(model, s);
    // OK(torch-autocast-region): a bfloat16 region, closed when bf16_loss()
    // returned; bfloat16 needs no loss scale.
    loss.backward();
    opt.step();
  }
}

// Mean per-site MAE; a site without readings is logged and counts as 0.
double validate(PvNet &model, const std::map<std::string, Series> &sites) {
  torch::NoGradGuard no_grad;
  double total = 0;
  // OK(torch-autocast-region): the throw is caught by this function's own
  // try block; the switch-off below runs on every path.
  at::autocast::set_enabled(true);
  for (const auto &entry : sites) {
    try {
      if (entry.second.x.size(0) == 0)
        throw std::runtime_error("site " + entry.first + " has no readings");
      // OK(torch-eval-mode-missing): main() calls model->eval() before validating.
      auto pred = model->forward(entry.second.x).to(torch::kFloat);
      total += (pred - entry.second.y).abs().mean().item<double>();
    } catch (const std::runtime_error &e) {
      std::cerr << e.what() << '\n';
    }
  }
  at::autocast::set_enabled(false);
  return total / static_cast<double>(sites.size());
}

// Rolls the nowcast `horizon` steps ahead; empty when it turns non-finite.
std::vector<float> rollout(PvNet &model, torch::Tensor window, int64_t horizon) {
  torch::NoGradGuard no_grad;
  std::vector<float> out;
  // BUG(torch-autocast-region): the early return inside the loop skips the
  // switch-off below and leaves the serving thread in float16.
  at::autocast::set_enabled(true);
  for (int64_t h = 0; h < horizon; ++h) {
    // OK(torch-eval-mode-missing): main() calls model->eval() before serving.
    auto next = model->forward(window).to(torch::kFloat);
    if (!torch::isfinite(next).all().item<bool>())
      return {};
    out.push_back(next.item<float>());
    window = torch::cat({window.narrow(1, 1, kWindow - 1), next}, 1);
  }
  at::autocast::set_enabled(false);
  return out;
}

int main() {
  torch::manual_seed(127);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  PvNet model;
  model->to(device);
  pretrain(model, synth_series(64, 128, 0.3, device), device.is_cuda(), 256.0, 3);
  finetune_site(model, synth_series(16, 64, 0.3, device), 256.0);
  adapt_to_weather(model, synth_series(32, 64, 0.7, device));
  refit_head_bf16(model, synth_series(8, 64, 0.5, device));

  model->eval();
  std::map<std::string, Series> sites{{"roof-a", synth_series(1, 256, 0.3, device).front()},
                                      {"field-b", synth_series(1, 256, 0.6, device).front()}};
  std::cout << "site MAE " << validate(model, sites) << '\n';
  auto path = rollout(model, synth_series(1, 1, 0.3, device).front().x, 8);
  std::cout << "forecast steps " << path.size() << '\n';
}
