// A variational auto-encoder on 28x28 images decoded from raw bytes: an
// image type with a static factory, a running-average meter, and a latent
// export for a half-precision consumer.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

struct VaeConfig {
  int64_t latent = 16;
  int64_t batch = 64;
  int64_t steps = 300;
  double beta = 1.0;
};

class Image {
 public:
  // Decodes a batch of 8-bit images into a float tensor in [0, 1].
  static torch::Tensor from_bytes(const std::vector<uint8_t> &bytes, int64_t n) {
    std::vector<uint8_t> buffer(bytes);
    auto raw = torch::from_blob(buffer.data(), {n, 1, 28, 28}, torch::kUInt8);
    return raw.to(torch::kFloat).div(255.0).clone();
  }
};

std::vector<uint8_t> read_batch_bytes(int64_t n, std::mt19937 &rng) {
  std::uniform_int_distribution<int> pixel(0, 255);
  std::vector<uint8_t> bytes(static_cast<size_t>(n * 28 * 28));
  for (auto &b : bytes)
    b = static_cast<uint8_t>(pixel(rng));
  return bytes;
}

struct AverageMeter {
  torch::Tensor sum;
  int64_t count = 0;
  void add(const torch::Tensor &value) {
    // BUG(torch-loss-accumulation-graph): main() adds the KL term of every
    // training step here with its graph; 'sum' outlives all of them.
    sum += value;
    ++count;
  }
};

struct VaeImpl : torch::nn::Module {
  explicit VaeImpl(int64_t latent)
      : enc(register_module("enc", torch::nn::Linear(784, 400))),
        mu(register_module("mu", torch::nn::Linear(400, latent))),
        logvar(register_module("logvar", torch::nn::Linear(400, latent))),
        dec1(register_module("dec1", torch::nn::Linear(latent, 400))),
        dec2(register_module("dec2", torch::nn::Linear(400, 784))) {}

  std::vector<torch::Tensor> forward(torch::Tensor x) {
    auto h = torch::relu(enc(x.flatten(1)));
    auto m = mu(h), lv = logvar(h);
    auto z = m + torch::randn_like(m) * torch::exp(0.5 * lv);
    return {torch::sigmoid(dec2(torch::relu(dec1(z)))), m, lv, z};
  }
  torch::nn::Linear enc, mu, logvar, dec1, dec2;
};
TORCH_MODULE(Vae);

torch::Tensor export_latents(Vae &vae, const torch::Tensor &images) {
  torch::NoGradGuard no_grad;
  auto z = vae->forward(images)[3];
  // BUG(torch-tensor-to-discarded): the half-precision copy is thrown away;
  // 'z' is returned in float32.
  z.to(torch::kHalf);
  return z;
}

int main() {
  VaeConfig cfg;
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Vae vae(cfg.latent);
  vae->to(device);
  torch::optim::Adam opt(vae->parameters(), torch::optim::AdamOptions(1e-3));
  std::mt19937 rng(7);

  AverageMeter kl_meter{torch::zeros({}, device)};
  auto recon_sum = torch::zeros({}, device);
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto bytes = read_batch_bytes(cfg.batch, rng);
    auto images = Image::from_bytes(bytes, cfg.batch);
    // BUG(torch-non-blocking-pageable): from_bytes() returns a clone of a
    // vector-backed tensor, pageable host memory.
    auto x = images.to(device, /*non_blocking=*/true);
    auto out = vae->forward(x);
    auto recon = torch::binary_cross_entropy(out[0], x.flatten(1), {}, at::Reduction::Sum) / cfg.batch;
    auto kl = -0.5 * torch::sum(1 + out[2] - out[1].pow(2) - out[2].exp()) / cfg.batch;
    auto loss = recon + cfg.beta * kl;
    opt.zero_grad();
    loss.backward();
    opt.step();
    kl_meter.add(kl);
    // OK(torch-loss-accumulation-graph): detached.
    recon_sum += recon.detach();
  }
  std::cout << "recon " << (recon_sum / cfg.steps).item<double>() << " kl "
            << (kl_meter.sum / kl_meter.count).item<double>() << '\n';

  auto sample = Image::from_bytes(read_batch_bytes(8, rng), 8).to(device);
  std::cout << "latents " << export_latents(vae, sample).sizes() << '\n';
  return 0;
}
