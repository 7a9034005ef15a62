// A denoising diffusion model on a 2-D toy distribution (a noisy ring). The
// noise schedule is a std::variant of a linear and a cosine schedule; the
// training loop pulls batches from a data loader iterator until a step budget
// is spent; a sampler renders previews and a trajectory for an animation.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <variant>
#include <vector>

constexpr int64_t kSteps = 200;

struct LinearSchedule {
  double beta_start = 1e-4, beta_end = 2e-2;
  torch::Tensor betas(int64_t n) const { return torch::linspace(beta_start, beta_end, n); }
};

struct CosineSchedule {
  double s = 8e-3;
  torch::Tensor betas(int64_t n) const {
    auto t = torch::linspace(0, 1, n + 1);
    auto f = torch::cos((t + s) / (1 + s) * M_PI / 2).pow(2);
    auto alpha_bar = f / f[0];
    return (1 - alpha_bar.slice(0, 1) / alpha_bar.slice(0, 0, n)).clamp(0, 0.999);
  }
};

using Schedule = std::variant<LinearSchedule, CosineSchedule>;

torch::Tensor make_betas(const Schedule &schedule) {
  return std::visit([](const auto &s) { return s.betas(kSteps).to(torch::kFloat); }, schedule);
}

// Points on a ring of radius 2 with a little noise, stored as double.
class RingDataset : public torch::data::datasets::Dataset<RingDataset> {
 public:
  explicit RingDataset(int64_t n) {
    auto angle = torch::rand({n}, torch::kDouble) * 2 * M_PI;
    points_ = torch::stack({angle.cos(), angle.sin()}, 1) * 2 + 0.05 * torch::randn({n, 2}, torch::kDouble);
  }
  torch::data::Example<> get(size_t index) override {
    auto p = points_[static_cast<int64_t>(index)];
    // BUG(torch-tensor-to-discarded): Tensor::to returns the float copy; the
    // example still holds the double point.
    p.to(torch::kFloat);
    return {p, torch::zeros({1})};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(points_.size(0)); }

 private:
  torch::Tensor points_;
};

struct DenoiserImpl : torch::nn::Module {
  DenoiserImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(3, 128), torch::nn::SiLU(),
                                                         torch::nn::Linear(128, 128), torch::nn::SiLU(),
                                                         torch::nn::Linear(128, 2)))) {}
  // Predicts the noise added to x at time t in [0, 1].
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &t) { return net->forward(torch::cat({x, t}, 1)); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Denoiser);

// The second GPU renders previews while the first one keeps training.
torch::Device preview_device() {
  // BUG(torch-device-index-unchecked): the ordinal is never compared with
  // device_count(); a single-GPU node has no cuda:1.
  static const torch::Device device("cuda:1");
  return device;
}

void train(Denoiser model, const Schedule &schedule, torch::Device device, int64_t max_steps) {
  auto loader = torch::data::make_data_loader(RingDataset(50000).map(torch::data::transforms::Stack<>()),
                                              torch::data::DataLoaderOptions().batch_size(512).workers(2));
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(2e-3));
  auto alpha_bar = torch::cumprod(1 - make_betas(schedule), 0).to(device);

  auto it = loader->begin();
  int64_t step = 0;
  bool done = false;
  while (!done) {
    if (it == loader->end()) {
      // BUG(torch-empty-cache-in-loop): at every epoch boundary the cache is
      // handed back to the driver, then the next epoch allocates it again.
      c10::cuda::CUDACachingAllocator::emptyCache();
      it = loader->begin();
    }
    auto batch = *it;
    // BUG(torch-non-blocking-pageable): batches of a torch::data loader are
    // pageable; the flag does nothing.
    auto x0 = batch.data.to(device, torch::kFloat, /*non_blocking=*/true);
    auto t = torch::randint(0, kSteps, {x0.size(0)}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto ab = alpha_bar.index({t}).unsqueeze(1);
    auto noise = torch::randn_like(x0);
    auto xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise;
    auto loss = torch::mse_loss(model->forward(xt, t.unsqueeze(1).to(torch::kFloat) / kSteps), noise);
    opt.zero_grad();
    loss.backward();
    opt.step();
    ++it;
    done = ++step >= max_steps;
  }
}

torch::Tensor sample(Denoiser model, const Schedule &schedule, int64_t n, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto betas = make_betas(schedule).to(device);
  auto alphas = 1 - betas;
  auto alpha_bar = torch::cumprod(alphas, 0);
  auto x = torch::randn({n, 2}, device);
  for (int64_t t = kSteps - 1; t >= 0; --t) {
    auto tt = torch::full({n, 1}, static_cast<double>(t) / kSteps, torch::TensorOptions().device(device));
    // OK(torch-inference-without-no-grad): the sampler holds a NoGradGuard.
    auto eps = model->forward(x, tt);
    x = (x - betas[t] / (1 - alpha_bar[t]).sqrt() * eps) / alphas[t].sqrt();
    if (t > 0)
      x = x + betas[t].sqrt() * torch::randn_like(x);
  }
  return x;
}

// Every 20th state of one reverse process, for an animation.
std::vector<torch::Tensor> trajectory(Denoiser model, const Schedule &schedule, int64_t n, torch::Device device) {
  auto betas = make_betas(schedule).to(device);
  auto alphas = 1 - betas;
  auto alpha_bar = torch::cumprod(alphas, 0);
  auto x = torch::randn({n, 2}, device);
  std::vector<torch::Tensor> frames;
  for (int64_t t = kSteps - 1; t >= 0; --t) {
    auto tt = torch::full({n, 1}, static_cast<double>(t) / kSteps, torch::TensorOptions().device(device));
    // BUG(torch-inference-without-no-grad): no guard; the graph of all 200
    // denoising steps is kept alive through x.
    auto eps = model->forward(x, tt);
    x = (x - betas[t] / (1 - alpha_bar[t]).sqrt() * eps) / alphas[t].sqrt();
    // OK(torch-tensor-to-discarded): clamp_ works in place.
    x.clamp_(-4.0, 4.0);
    if (t % 20 == 0) {
      // OK(torch-loss-accumulation-graph): the frames are returned and nothing
      // in this loop calls backward().
      frames.push_back(x.cpu());
    }
  }
  return frames;
}

int main(int argc, char **argv) {
  const bool cosine = argc > 1 && std::string(argv[1]) == "--cosine";
  Schedule schedule = cosine ? Schedule{CosineSchedule{}} : Schedule{LinearSchedule{}};
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Denoiser model;
  model->to(device);
  train(model, schedule, device, 20000);

  auto samples = sample(model, schedule, 4096, device);
  std::cout << "sample radius " << samples.norm(2, 1).mean().item<double>() << '\n';
  auto frames = trajectory(model, schedule, 256, device);
  std::cout << frames.size() << " frames\n";

  if (torch::cuda::is_available()) {
    auto preview = preview_device();
    model->to(preview);
    auto p = sample(model, schedule, 1024, preview);
    std::cout << "preview radius " << p.norm(2, 1).mean().item<double>() << '\n';
  }
  return 0;
}
