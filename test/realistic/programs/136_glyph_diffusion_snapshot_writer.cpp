// A small DDPM that learns 16x16 font glyphs, then samples a sheet of new
// glyphs and writes every 100th denoising step as a PGM so the designers can
// watch the glyphs form. Training batches come from a prefetch deque filled
// on the host; the preview render goes to the workstation's second card so
// that the training job on the first keeps its memory.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <deque>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace preview {
// BUG(torch-device-index-unchecked): the preview card is ordinal 1 on the
// designers' workstation; nothing compares it with device_count().
constexpr int kGpu = 1;
constexpr int64_t kEvery = 100;
}  // namespace preview

constexpr int64_t kSide = 16, kSteps = 1000, kBatch = 64;

struct DenoiserImpl : torch::nn::Module {
  DenoiserImpl()
      : t_embed(register_module("t_embed", torch::nn::Linear(1, 32))),
        c1(register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1)))),
        c2(register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 32, 3).padding(1)))),
        c3(register_module("c3", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 1, 3).padding(1)))),
        norm(register_module("norm", torch::nn::GroupNorm(8, 32))) {}
  torch::Tensor forward(const torch::Tensor &x, const torch::Tensor &t) {
    auto emb = t_embed->forward(t.to(torch::kFloat).unsqueeze(1) / kSteps).view({-1, 32, 1, 1});
    auto h = torch::silu(norm->forward(c1->forward(x) + emb));
    h = torch::silu(c2->forward(h));
    return c3->forward(h);
  }
  torch::nn::Linear t_embed;
  torch::nn::Conv2d c1, c2, c3;
  torch::nn::GroupNorm norm;
};
TORCH_MODULE(Denoiser);

struct Schedule {
  torch::Tensor beta, alpha, alpha_bar;
  static Schedule linear(torch::Device device) {
    auto beta = torch::linspace(1e-4, 0.02, kSteps, torch::TensorOptions().device(device));
    auto alpha = 1.0 - beta;
    return Schedule{beta, alpha, torch::cumprod(alpha, 0)};
  }
};

// Rasterised strokes standing in for the glyph renderer: a few bars per image.
torch::Tensor render_glyphs(int64_t n) {
  auto img = torch::zeros({n, 1, kSide, kSide});
  auto rows = torch::randint(2, kSide - 2, {n});
  auto acc = rows.accessor<int64_t, 1>();
  for (int64_t i = 0; i < n; ++i) {
    img[i][0][acc[i]].fill_(1.0);
    img[i][0].select(1, (acc[i] * 3) % kSide).fill_(1.0);
  }
  return img * 2.0 - 1.0;
}

class Prefetcher {
 public:
  void refill(int64_t batches) {
    while (static_cast<int64_t>(queue_.size()) < batches)
      queue_.push_back(render_glyphs(kBatch));
  }
  torch::Tensor pop() {
    auto b = queue_.front();
    queue_.pop_front();
    return b;
  }

 private:
  std::deque<torch::Tensor> queue_;
};

// [N, 1, H, W] -> one PGM strip of N glyphs stacked vertically.
void write_pgm(const torch::Tensor &imgs, const std::string &path) {
  auto u8 = ((imgs.reshape({-1, kSide}).clamp(-1, 1) + 1) * 127.5).to(torch::kUInt8).contiguous();
  std::ofstream out(path, std::ios::binary);
  out << "P5\n" << u8.size(-1) << " " << u8.size(-2) << "\n255\n";
  out.write(reinterpret_cast<const char *>(u8.data_ptr<uint8_t>()), u8.numel());
}

// Appends the step's loss to the history when the step's scope closes.
class LossRecorder {
 public:
  LossRecorder(std::vector<float> &history, const torch::Tensor &loss) : history_(history), loss_(loss.detach()) {}
  ~LossRecorder() {
    // BUG(torch-host-sync-in-loop): the recorder goes out of scope at the end
    // of every training step and reads the device loss back then.
    history_.push_back(loss_.item<float>());
  }

 private:
  std::vector<float> &history_;
  torch::Tensor loss_;
};

void train(Denoiser &net, const Schedule &sched, torch::Device device, int64_t iters) {
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(2e-4));
  Prefetcher prefetch;
  std::vector<float> history;
  net->train();
  for (int64_t it = 0; it < iters; ++it) {
    prefetch.refill(8);
    // BUG(torch-non-blocking-pageable): the deque holds tensors rendered with
    // torch::zeros on the host, never pinned; the upload is synchronous.
    auto x0 = prefetch.pop().to(device, /*non_blocking=*/true);
    auto t = torch::randint(0, kSteps, {kBatch}, torch::TensorOptions().device(device).dtype(torch::kLong));
    auto noise = torch::randn_like(x0);
    auto ab = sched.alpha_bar.index_select(0, t).view({-1, 1, 1, 1});
    auto xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise;
    auto loss = torch::mse_loss(net->forward(xt, t), noise);
    opt.zero_grad();
    loss.backward();
    opt.step();
    LossRecorder record(history, loss);
    if (it % 500 == 0)
      // OK(torch-host-sync-in-loop): logged every 500 iterations only.
      std::cout << "iter " << it << " eps-mse " << loss.item<float>() << "\n";
  }
  std::cout << "final eps-mse " << history.back() << "\n";
}

class SnapshotSampler {
 public:
  SnapshotSampler(Denoiser net, Schedule sched) : net_(std::move(net)), sched_(std::move(sched)) {}

  std::vector<torch::Tensor> sample(int64_t n) {
    torch::NoGradGuard no_grad;
    net_->eval();
    // BUG(torch-cuda-unguarded): the sampler assumes a GPU; main() calls it
    // on every machine, CPU-only ones included.
    auto x = torch::randn({n, 1, kSide, kSide}).cuda();
    std::vector<torch::Tensor> snapshots;
    for (int64_t i = kSteps - 1; i >= 0; --i) {
      auto t = torch::full({n}, i, torch::TensorOptions().device(x.device()).dtype(torch::kLong));
      auto eps = net_->forward(x, t);
      auto a = sched_.alpha[i], ab = sched_.alpha_bar[i], b = sched_.beta[i];
      x = (x - b / (1 - ab).sqrt() * eps) / a.sqrt();
      if (i > 0)
        x = x + b.sqrt() * torch::randn_like(x);
      if (i % preview::kEvery == 0)
        snapshots.push_back(x.to(torch::kCPU, /*non_blocking=*/true));
    }
    return snapshots;
  }

 private:
  Denoiser net_;
  Schedule sched_;
};

int main() {
  torch::manual_seed(136);
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  Denoiser net;
  net->to(device);
  auto sched = Schedule::linear(device);
  train(net, sched, device, 20000);

  SnapshotSampler sampler(net, sched);
  auto snaps = sampler.sample(16);
  int64_t k = 0;
  for (const auto &s : snaps)
    // BUG(torch-non-blocking-d2h-race): each snapshot is a non-blocking copy
    // off the GPU; nothing synchronised before the writer reads it.
    write_pgm(s, "step_" + std::to_string(k++) + ".pgm");

  if (torch::cuda::is_available()) {
    // OK(torch-cuda-unguarded): the preview card is used only when CUDA is
    // available (its ordinal is the bug marked at the constant).
    const torch::Device preview_dev(torch::kCUDA, preview::kGpu);
    Denoiser preview_net = std::dynamic_pointer_cast<DenoiserImpl>(net->clone(preview_dev));
    torch::NoGradGuard no_grad;
    preview_net->eval();
    auto x = torch::randn({4, 1, kSide, kSide}, torch::TensorOptions().device(preview_dev));
    auto eps = preview_net->forward(x, torch::full({4}, kSteps - 1, torch::TensorOptions().device(preview_dev).dtype(torch::kLong)));
    auto host_eps = eps.to(torch::kCPU, /*non_blocking=*/true);
    torch::cuda::synchronize(preview::kGpu);
    // OK(torch-non-blocking-d2h-race): the preview card was synchronised.
    write_pgm(host_eps, "preview_eps.pgm");
  }
  return 0;
}
