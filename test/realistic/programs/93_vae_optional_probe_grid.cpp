// Variational autoencoder on flattened 28x28 images with a linear KL
// warm-up. encode() returns (mu, logvar) as a pair and the loss helper
// returns (reconstruction, kl) the same way; both are used through
// structured bindings. A sample-grid writer keeps an optional fixed latent
// probe so that successive grids are comparable.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

constexpr int64_t kLatent = 16;
constexpr int64_t kPixels = 784;

struct VaeImpl : torch::nn::Module {
  VaeImpl()
      : enc(register_module("enc", torch::nn::Linear(kPixels, 400))),
        mu_head(register_module("mu_head", torch::nn::Linear(400, kLatent))),
        lv_head(register_module("lv_head", torch::nn::Linear(400, kLatent))),
        dec1(register_module("dec1", torch::nn::Linear(kLatent, 400))),
        dec2(register_module("dec2", torch::nn::Linear(400, kPixels))) {}

  std::pair<torch::Tensor, torch::Tensor> encode(const torch::Tensor &x) {
    auto h = torch::relu(enc->forward(x));
    return {mu_head->forward(h), lv_head->forward(h)};
  }
  torch::Tensor decode(const torch::Tensor &z) { return torch::sigmoid(dec2->forward(torch::relu(dec1->forward(z)))); }
  torch::Tensor forward(const torch::Tensor &x) {
    auto [mu, logvar] = encode(x);
    return decode(mu);
  }

  torch::nn::Linear enc, mu_head, lv_head, dec1, dec2;
};
TORCH_MODULE(Vae);

// Negative ELBO split into its two terms, each averaged over the batch.
std::pair<torch::Tensor, torch::Tensor> elbo_terms(Vae &vae, const torch::Tensor &x) {
  auto [mu, logvar] = vae->encode(x);
  auto z = mu + torch::randn_like(mu) * torch::exp(0.5 * logvar);
  auto recon = vae->decode(z);
  auto bce = torch::binary_cross_entropy(recon, x, {}, at::Reduction::Sum) / x.size(0);
  auto kl = -0.5 * torch::sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.size(0);
  return {bce, kl};
}

class GridWriter {
 public:
  explicit GridWriter(std::string prefix) : prefix_(std::move(prefix)) {}

  void write(Vae &vae, int64_t epoch) {
    if (!probe_)
      probe_ = torch::randn({64, kLatent});
    torch::NoGradGuard no_grad;
    auto imgs = vae->decode(*probe_);
    torch::save(imgs.view({64, 1, 28, 28}).cpu(), prefix_ + std::to_string(epoch) + ".pt");
  }

 private:
  std::string prefix_;
  std::optional<torch::Tensor> probe_;
};

torch::Tensor fake_batch(int64_t n) { return torch::rand({n, kPixels}).gt(0.7).to(torch::kFloat); }

int main(int argc, char **argv) {
  const bool want_gpu = argc > 1 && std::string(argv[1]) == "--gpu";
  if (want_gpu && !torch::cuda::is_available()) {
    std::cerr << "--gpu given but CUDA is not available\n";
    return 1;
  }
  // OK(torch-cuda-unguarded): --gpu without CUDA returned above.
  torch::Device device = want_gpu ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);

  Vae vae;
  vae->to(device);
  torch::optim::Adam opt(vae->parameters(), torch::optim::AdamOptions(1e-3));
  GridWriter grids("vae_grid_");

  const int64_t steps_per_epoch = 400;
  std::vector<double> epoch_bce;
  for (int64_t epoch = 0; epoch < 20; ++epoch) {
    torch::Tensor kl_sum = torch::zeros({}, device);
    torch::Tensor bce_sum = torch::zeros({}, device);
    for (int64_t step = 0; step < steps_per_epoch; ++step) {
      auto x = fake_batch(128).to(device);
      auto [bce, kl] = elbo_terms(vae, x);
      const double beta = std::min(1.0, (epoch * steps_per_epoch + step) / 4000.0);
      auto loss = bce + beta * kl;
      opt.zero_grad();
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): the KL term keeps its graph and
      // is summed into a tensor that lives for the whole epoch.
      kl_sum += kl;
      // OK(torch-loss-accumulation-graph): detached first.
      bce_sum += bce.detach();
      // BUG(torch-host-sync-in-loop): the raw KL is read back on every
      // step to watch for posterior collapse.
      const double raw_kl = kl.item<double>();
      if (raw_kl < 0.1 && step % 50 == 0)
        std::cout << "warning: KL " << raw_kl << " near zero\n";
      if (step % 100 == 0)
        // OK(torch-host-sync-in-loop): every 100 steps.
        std::cout << "epoch " << epoch << " step " << step << " loss " << loss.item<float>() << "\n";
    }
    epoch_bce.push_back((bce_sum / steps_per_epoch).item<double>());
    std::cout << "epoch " << epoch << " bce " << epoch_bce.back() << " kl "
              << (kl_sum / steps_per_epoch).item<double>() << "\n";
    // BUG(torch-device-mismatch): write() decodes its host probe latents
    // with this VAE, whose layers were moved to the training device.
    grids.write(vae, epoch);
  }

  // Reconstruction error on held-out batches.
  vae->eval();
  double recon_err = 0;
  for (int i = 0; i < 50; ++i) {
    auto xv = fake_batch(256).to(device);
    // BUG(torch-inference-without-no-grad): evaluation forward with autograd
    // recording; nothing here calls backward.
    auto rec = vae->forward(xv);
    recon_err += torch::mse_loss(rec, xv).item<double>();
  }
  std::cout << "held-out mse " << recon_err / 50 << "\n";
  torch::save(vae, "vae.pt");
  return 0;
}
