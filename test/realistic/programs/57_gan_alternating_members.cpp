// A small GAN on a 2-D ring of Gaussians. The trainer class owns both
// networks and both optimizers; the discriminator and the generator updates
// are separate member functions that fit() alternates (n_critic
// discriminator steps per generator step). The "real" samples come from a
// host-side sampler that pins its output, as a data-loading thread would.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kLatent = 8;
constexpr int64_t kBatch = 256;

struct GenImpl : torch::nn::Module {
  GenImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kLatent, 128))),
        bn(register_module("bn", torch::nn::BatchNorm1d(128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 2))) {}
  torch::Tensor forward(torch::Tensor z) { return fc2(torch::relu(bn(fc1(z)))); }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Gen);

struct DiscImpl : torch::nn::Module {
  DiscImpl()
      : fc1(register_module("fc1", torch::nn::Linear(2, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::leaky_relu(fc1(x), 0.2)); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Disc);

// Host-side sampler of the target distribution, returns pinned memory.
torch::Tensor sample_ring(int64_t n) {
  auto angle = torch::randint(0, 8, {n}).to(torch::kFloat) * (2.0 * M_PI / 8.0);
  auto pts = torch::stack({torch::cos(angle), torch::sin(angle)}, 1) * 2.0;
  return (pts + 0.05 * torch::randn({n, 2})).pin_memory();
}

class GanTrainer {
 public:
  explicit GanTrainer(torch::Device device)
      : device_(device),
        g_opt_(gen_->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999})),
        d_opt_(disc_->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999})) {
    gen_->to(device_);
    disc_->to(device_);
    g_running_ = torch::zeros({}, device_);
    d_running_ = torch::zeros({}, device_);
  }

  void fit(int64_t steps, int64_t n_critic) {
    gen_->train();
    disc_->train();
    for (int64_t step = 1; step <= steps; ++step) {
      for (int64_t k = 0; k < n_critic; ++k)
        d_step();
      g_step();
      if (step % 200 == 0) {
        // OK(torch-host-sync-in-loop): logged every 200 steps.
        std::cout << "step " << step << " d " << d_running_.item<double>() / (200.0 * n_critic) << " g "
                  << g_running_.item<double>() / 200.0 << '\n';
        d_running_.zero_();
        g_running_.zero_();
      }
    }
  }

  // Draws a few samples for a scatter plot once training is over.
  torch::Tensor sample(int64_t n) {
    torch::NoGradGuard no_grad;
    gen_->eval();
    // OK(torch-device-mismatch): the latent batch is created on device_.
    auto z = torch::randn({n, kLatent}, torch::TensorOptions().device(device_));
    auto out = gen_->forward(z).to(torch::kCPU, /*non_blocking=*/true);
    // OK(torch-non-blocking-d2h-race): the stream is drained before the
    // caller reads the samples.
    if (device_.is_cuda())
      torch::cuda::synchronize();
    gen_->train();
    return out;
  }

 private:
  void d_step() {
    // OK(torch-non-blocking-pageable): sample_ring() returns pinned memory.
    auto real = sample_ring(kBatch).to(device_, /*non_blocking=*/true);
    auto noise = torch::randn({kBatch, kLatent});
    // BUG(torch-non-blocking-pageable): the noise is drawn in pageable host
    // memory; non_blocking does not make this copy asynchronous.
    auto z = noise.to(device_, /*non_blocking=*/true);
    // OK(torch-device-mismatch): the fake batch is produced on device_ and
    // detached so the generator gets no gradient from this step.
    auto fake = gen_->forward(z).detach();
    d_opt_.zero_grad();
    auto loss = torch::softplus(-disc_->forward(real)).mean() + torch::softplus(disc_->forward(fake)).mean();
    loss.backward();
    d_opt_.step();
    // OK(torch-loss-accumulation-graph): detached before it is kept.
    d_running_ += loss.detach();
  }

  void g_step() {
    auto z = torch::randn({kBatch, kLatent}, torch::TensorOptions().device(device_));
    g_opt_.zero_grad();
    auto loss = torch::softplus(-disc_->forward(gen_->forward(z))).mean();
    loss.backward();
    g_opt_.step();
    // BUG(torch-loss-accumulation-graph): g_running_ is a member that lives
    // across steps; adding the loss keeps each generator graph alive.
    g_running_ += loss;
    // BUG(torch-host-sync-in-loop): g_step() runs once per training step,
    // and this reads the loss back every time.
    history_.push_back(loss.item<float>());
  }

  torch::Device device_;
  Gen gen_;
  Disc disc_;
  torch::optim::Adam g_opt_;
  torch::optim::Adam d_opt_;
  torch::Tensor g_running_;
  torch::Tensor d_running_;
  std::vector<float> history_;
};

int main() {
  torch::manual_seed(1);
  if (!torch::cuda::is_available()) {
    std::cerr << "this experiment needs a GPU\n";
    return 1;
  }
  // OK(torch-cuda-unguarded): main returned above when CUDA is missing.
  torch::Device device(torch::kCUDA);
  GanTrainer trainer(device);
  trainer.fit(2000, 2);
  // OK(torch-empty-cache-in-loop): after training, before the sampling run.
  c10::cuda::CUDACachingAllocator::emptyCache();
  auto pts = trainer.sample(1024);
  std::cout << "sample mean radius " << pts.norm(2, 1).mean().item<double>() << '\n';
  return 0;
}
