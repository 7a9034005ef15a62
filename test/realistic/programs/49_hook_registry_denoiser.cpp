// A convolutional denoising autoencoder for 32x32 grayscale patches. The
// Engine runs named hooks after every optimiser step; the hooks live in an
// std::unordered_map<std::string, std::function<void(StepContext &)>> so that
// an experiment can add, replace or remove them by name.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <iostream>
#include <string>
#include <unordered_map>
#include <utility>

struct ConvAEImpl : torch::nn::Module {
  ConvAEImpl()
      : enc1(register_module("enc1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).stride(2).padding(1)))),
        enc2(register_module("enc2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).stride(2).padding(1)))),
        dec1(register_module("dec1", torch::nn::ConvTranspose2d(
                                         torch::nn::ConvTranspose2dOptions(32, 16, 4).stride(2).padding(1)))),
        dec2(register_module("dec2", torch::nn::ConvTranspose2d(
                                         torch::nn::ConvTranspose2dOptions(16, 1, 4).stride(2).padding(1)))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(enc2(torch::relu(enc1(x))));
    return torch::sigmoid(dec2(torch::relu(dec1(x))));
  }
  torch::nn::Conv2d enc1, enc2;
  torch::nn::ConvTranspose2d dec1, dec2;
};
TORCH_MODULE(ConvAE);

struct StepContext {
  int64_t step = 0;
  bool is_last = false;
  torch::Tensor input;
  torch::Tensor output;
  torch::Tensor loss;
};
using Hook = std::function<void(StepContext &)>;

// Smooth random "images": low-frequency noise upsampled to 32x32.
torch::Tensor synth_patches(int64_t n) {
  auto coarse = torch::rand({n, 1, 8, 8});
  return torch::nn::functional::interpolate(
      coarse, torch::nn::functional::InterpolateFuncOptions().size(std::vector<int64_t>{32, 32}).mode(torch::kBilinear).align_corners(false));
}

class Engine {
 public:
  Engine(torch::Device device, double lr)
      : device_(device), opt_(model_->parameters(), torch::optim::AdamOptions(lr)) {
    model_->to(device_);
  }

  void on(const std::string &name, Hook hook) { hooks_[name] = std::move(hook); }
  void remove(const std::string &name) { hooks_.erase(name); }
  ConvAE &model() { return model_; }
  torch::Device device() const { return device_; }

  void fit(int64_t steps, int64_t batch) {
    model_->train();
    StepContext ctx;
    for (int64_t step = 0; step < steps; ++step) {
      // BUG(torch-non-blocking-pageable): synth_patches() returns a pageable
      // tensor; non_blocking does nothing and the copy runs synchronously.
      auto clean = synth_patches(batch).to(device_, /*non_blocking=*/true);
      auto noisy = (clean + 0.15 * torch::randn_like(clean)).clamp(0.0, 1.0);
      opt_.zero_grad();
      auto out = model_->forward(noisy);
      auto loss = torch::mse_loss(out, clean);
      loss.backward();
      // BUG(torch-host-sync-in-loop): a NaN check on every step reads the
      // loss back and waits for the step to finish.
      if (!torch::isfinite(loss).item<bool>()) throw std::runtime_error("loss diverged");
      opt_.step();
      ctx.step = step;
      ctx.is_last = step + 1 == steps;
      ctx.input = noisy;
      ctx.output = out;
      ctx.loss = loss;
      for (auto &entry : hooks_) entry.second(ctx);
    }
  }

 private:
  torch::Device device_;
  ConvAE model_;
  torch::optim::Adam opt_;
  std::unordered_map<std::string, Hook> hooks_;
};

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Engine engine(device, 2e-3);

  engine.on("log", [](StepContext &c) {
    if (c.step % 100 == 0) {
      // OK(torch-host-sync-in-loop): read every 100 steps.
      std::cout << "step " << c.step << " mse " << c.loss.item<double>() << '\n';
    }
  });

  auto psnr_sum = torch::zeros({}, device);
  int64_t psnr_n = 0;
  engine.on("psnr", [&psnr_sum, &psnr_n](StepContext &c) {
    // BUG(torch-loss-accumulation-graph): the loss still carries the step's
    // graph; 'psnr_sum' outlives the training run.
    psnr_sum += -10.0 * torch::log10(c.loss);
    ++psnr_n;
  });

  engine.on("trim", [](StepContext &) {
    // BUG(torch-empty-cache-in-loop): fit() runs every hook after every step;
    // this drains the allocator's cache each time.
    c10::cuda::CUDACachingAllocator::emptyCache();
  });

  auto probe = synth_patches(4);
  auto probe_pinned = synth_patches(16).pin_memory();
  engine.on("preview", [&engine, probe, probe_pinned](StepContext &c) {
    if (!c.is_last) return;
    torch::NoGradGuard no_grad;
    engine.model()->eval();
    // BUG(torch-device-mismatch): 'probe' was made on the host; the model is
    // on the engine's device.
    auto recon = engine.model()->forward(probe);
    // OK(torch-non-blocking-pageable): 'probe_pinned' is pinned.
    auto val = probe_pinned.to(engine.device(), /*non_blocking=*/true);
    // OK(torch-device-mismatch): moved to the engine's device.
    auto val_recon = engine.model()->forward(val);
    std::cout << "preview mse " << torch::mse_loss(val_recon, val).item<double>() << " (" << recon.size(0)
              << " probes)\n";
    engine.model()->train();
  });

  engine.fit(2000, 64);
  engine.remove("trim");
  std::cout << "mean psnr " << (psnr_sum / static_cast<double>(psnr_n)).item<double>() << " dB\n";
  // OK(torch-empty-cache-in-loop): once, after training.
  c10::cuda::CUDACachingAllocator::emptyCache();
  return 0;
}
