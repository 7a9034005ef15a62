// A denoising autoencoder trained on the first GPU, with an exponential
// moving average of its weights kept on a second GPU (so that evaluating the
// EMA never competes with training for memory). A small Logger class writes
// scalars as "tag value" lines. Before training, the largest batch size is
// probed once.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>

struct DenoiserImpl : torch::nn::Module {
  DenoiserImpl()
      : enc(register_module("enc", torch::nn::Linear(64, 16))),
        dec(register_module("dec", torch::nn::Linear(16, 64))) {}
  torch::Tensor forward(torch::Tensor x) { return dec(torch::tanh(enc(x))); }
  torch::nn::Linear enc, dec;
};
TORCH_MODULE(Denoiser);

class Logger {
 public:
  explicit Logger(std::ostream &sink) : sink_(sink) {}
  void scalar(const std::string &tag, const torch::Tensor &value) const {
    // BUG(torch-host-sync-in-loop): train() logs the loss through here on
    // every step; item() waits for the whole step on the GPU.
    sink_ << tag << ' ' << value.item<double>() << '\n';
  }
  void scalar(const std::string &tag, double value) const { sink_ << tag << ' ' << value << '\n'; }

 private:
  std::ostream &sink_;
};

torch::Tensor noisy(const torch::Tensor &clean) { return clean + 0.3 * torch::randn_like(clean); }

void ema_update(Denoiser &ema, Denoiser &live, double decay) {
  torch::NoGradGuard no_grad;
  auto ema_params = ema->parameters();
  auto live_params = live->parameters();
  for (size_t i = 0; i < ema_params.size(); ++i)
    ema_params[i].mul_(decay).add_(live_params[i].detach().to(ema_params[i].device()), 1.0 - decay);
}

void train(Denoiser &live, Denoiser &ema, torch::Device main_dev, torch::Device ema_dev, const Logger &log,
           int64_t steps, int64_t batch) {
  torch::optim::Adam opt(live->parameters(), torch::optim::AdamOptions(1e-3));
  for (int64_t step = 0; step < steps; ++step) {
    auto clean = torch::rand({batch, 64}, main_dev);
    auto recon = live->forward(noisy(clean));
    auto loss = torch::mse_loss(recon, clean);
    opt.zero_grad();
    loss.backward();
    opt.step();
    ema_update(ema, live, 0.999);
    log.scalar("train/loss", loss);
    if (step % 500 == 0) {
      torch::NoGradGuard no_grad;
      ema->eval();
      // OK(torch-device-mismatch): the probe is moved to the EMA's device.
      auto ema_recon = ema->forward(clean.to(ema_dev));
      log.scalar("ema/loss", torch::mse_loss(ema_recon, clean.to(ema_dev)).item<double>());
    }
  }
}

// Runs once before training: the largest batch that fits.
int64_t probe_batch(Denoiser &live, torch::Device main_dev, int64_t batch) {
  auto attempt = [&]() {
    auto clean = torch::rand({batch, 64}, main_dev);
    auto loss = torch::mse_loss(live->forward(noisy(clean)), clean);
    loss.backward();
    live->zero_grad();
  };
  try {
    attempt();
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): 'batch' is unchanged; the retry asks
    // for the same peak the allocator just failed to find.
    c10::cuda::CUDACachingAllocator::emptyCache();
    attempt();
  }
  return batch;
}

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "needs CUDA\n";
    return 1;
  }
  torch::Device main_dev(torch::kCUDA, 0);
  // BUG(torch-device-index-unchecked): the program checks that CUDA exists,
  // never that a second device is visible.
  torch::Device ema_dev(torch::kCUDA, 1);

  Denoiser live;
  live->to(main_dev);
  Denoiser ema;
  ema->to(ema_dev);
  {
    torch::NoGradGuard no_grad;
    auto src = live->parameters();
    auto dst = ema->parameters();
    for (size_t i = 0; i < src.size(); ++i)
      dst[i].copy_(src[i]);
  }

  Logger log(std::cout);
  const int64_t batch = probe_batch(live, main_dev, 4096);
  train(live, ema, main_dev, ema_dev, log, 5000, batch);

  torch::NoGradGuard no_grad;
  ema->eval();
  auto clean = torch::rand({256, 64}, main_dev);
  // BUG(torch-device-mismatch): 'ema' lives on cuda:1; the evaluation batch
  // was made on cuda:0 (only the output is brought back).
  auto recon = ema->forward(clean).to(main_dev);
  log.scalar("final/ema_loss", torch::mse_loss(recon, clean).item<double>());
  return 0;
}
