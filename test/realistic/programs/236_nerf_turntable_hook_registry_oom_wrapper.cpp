// Neural radiance field for a turntable capture of a small product (a shoe on
// a rotating stage, cameras on a ring 4 m out): rays are sampled from random
// poses on the ring, an MLP over a sinusoidal encoding of the 3-D point gives
// density and colour, and the colour of a ray is the alpha-composited sum of
// its samples. The run registers named per-step hooks (learning-rate decay,
// handing memory back to the preview viewer that shares the card), reports
// through a RunLogger, and renders one held-out view at the end through a
// generic retry-on-OOM wrapper.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kFreqs = 8, kSamples = 48, kRays = 1024, kImage = 64;
constexpr int64_t kEncoded = 3 + 3 * 2 * kFreqs;
constexpr double kNear = 2.0, kFar = 6.0, kPi = 3.14159265358979323846;

torch::Device pick_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

torch::Tensor encode(const torch::Tensor &x) {
  std::vector<torch::Tensor> parts{x};
  for (int64_t k = 0; k < kFreqs; ++k) {
    const double f = std::pow(2.0, static_cast<double>(k)) * kPi;
    parts.push_back(torch::sin(f * x));
    parts.push_back(torch::cos(f * x));
  }
  return torch::cat(parts, -1);
}

struct RadianceFieldImpl : torch::nn::Module {
  explicit RadianceFieldImpl(int64_t width)
      : trunk(register_module("trunk", torch::nn::Sequential(torch::nn::Linear(kEncoded, width), torch::nn::ReLU(),
                                                             torch::nn::Linear(width, width), torch::nn::ReLU()))),
        sigma(register_module("sigma", torch::nn::Linear(width, 1))),
        color(register_module("color", torch::nn::Linear(width, 3))) {}

  // points [R, S, 3] -> density [R, S], colour [R, S, 3]
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor &points) {
    auto h = trunk->forward(encode(points));
    return {F::softplus(sigma->forward(h)).squeeze(-1), torch::sigmoid(color->forward(h))};
  }

  torch::nn::Sequential trunk;
  torch::nn::Linear sigma, color;
};
TORCH_MODULE(RadianceField);

struct Rays {
  torch::Tensor origins, dirs, rgb;
};

// Stand-in for the calibrated capture: colour depends on the viewing ray.
Rays sample_rays(int64_t n, torch::Device device) {
  auto theta = torch::rand({n}) * (2.0 * kPi);
  auto origins = torch::stack({4.0 * torch::cos(theta), 4.0 * torch::sin(theta), torch::full({n}, 0.5)}, 1);
  auto aim = 0.3 * torch::randn({n, 3});
  auto dirs = F::normalize(aim - origins, F::NormalizeFuncOptions().dim(1));
  auto rgb = torch::sigmoid(3.0 * dirs.roll(1, 1));
  return {origins.to(device), dirs.to(device), rgb.to(device)};
}

torch::Tensor composite(RadianceField &field, const torch::Tensor &o, const torch::Tensor &d, bool jitter) {
  const double step = (kFar - kNear) / static_cast<double>(kSamples);
  auto t = torch::linspace(kNear, kFar, kSamples, o.options()).expand({o.size(0), kSamples});
  if (jitter)
    t = t + step * torch::rand_like(t);
  auto [density, rgb] = field->forward(o.unsqueeze(1) + d.unsqueeze(1) * t.unsqueeze(-1));
  auto alpha = 1.0 - torch::exp(-density * step);
  auto shifted = torch::cat({torch::ones({o.size(0), 1}, o.options()), 1.0 - alpha + 1e-10}, 1);
  auto weights = alpha * torch::cumprod(shifted, 1).slice(1, 0, kSamples);
  return (weights.unsqueeze(-1) * rgb).sum(1);
}

using StepHook = std::function<void(int64_t)>;

class HookRegistry {
 public:
  void add(std::string name, StepHook hook) { hooks_.emplace_back(std::move(name), std::move(hook)); }
  void run(int64_t it) {
    for (auto &[name, hook] : hooks_)
      hook(it);
  }

 private:
  std::vector<std::pair<std::string, StepHook>> hooks_;
};

class RunLogger {
 public:
  explicit RunLogger(std::string run) : run_(std::move(run)) {}

  void step(int64_t it, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): called on every training step with the
    // loss on the training device; the EMA reads it back every step.
    const double v = loss.item<double>();
    ema_ = it == 0 ? v : 0.98 * ema_ + 0.02 * v;
    if (it % 500 == 0)
      std::cout << run_ << " it " << it << " loss(ema) " << ema_ << '\n';
  }

 private:
  std::string run_;
  double ema_ = 0.0;
};

struct EpochStats {
  torch::Tensor photometric, psnr_sum;
  int64_t steps = 0;
};

void record(EpochStats &stats, const torch::Tensor &loss) {
  // BUG(torch-loss-accumulation-graph): the step's loss goes into the
  // caller's epoch struct with its graph attached.
  stats.photometric += loss;
  // OK(torch-loss-accumulation-graph): detached before the PSNR.
  stats.psnr_sum += -10.0 * torch::log10(loss.detach());
  ++stats.steps;
}

template <typename Work>
auto retry_on_oom(Work &&work, int attempts) -> decltype(work()) {
  for (int a = 1;; ++a) {
    try {
      return work();
    } catch (const c10::OutOfMemoryError &) {
      if (a == attempts)
        throw;
      std::cerr << "out of memory while rendering, attempt " << a << '\n';
      // BUG(torch-empty-cache-oom-retry): work() renders the same view with
      // the same chunk size again; the allocator already emptied its cache.
      // BUG(torch-empty-cache-in-loop): on every pass of the attempt loop.
      c10::cuda::CUDACachingAllocator::emptyCache();
    }
  }
}

torch::Tensor render_view(RadianceField &field, double angle, torch::Device device, int64_t chunk) {
  torch::NoGradGuard no_grad;
  auto ys = torch::linspace(-0.4, 0.4, kImage, device);
  auto grid = torch::meshgrid({ys, ys}, "ij");
  auto forward_dir = torch::tensor({-std::cos(angle), -std::sin(angle), 0.0}, device).to(torch::kFloat);
  auto side = torch::tensor({-std::sin(angle), std::cos(angle), 0.0}, device).to(torch::kFloat);
  auto up = torch::tensor({0.0, 0.0, 1.0}, device).to(torch::kFloat);
  auto dirs = forward_dir + grid[1].reshape({-1, 1}) * side + grid[0].reshape({-1, 1}) * up;
  dirs = F::normalize(dirs, F::NormalizeFuncOptions().dim(1));
  auto origin = torch::tensor({4.0 * std::cos(angle), 4.0 * std::sin(angle), 0.5}, device).to(torch::kFloat);
  std::vector<torch::Tensor> pixels;
  for (const auto &d : dirs.split(chunk))
    pixels.push_back(composite(field, origin.expand({d.size(0), 3}), d, false));
  return torch::cat(pixels).reshape({kImage, kImage, 3});
}

void train(RadianceField &field, torch::optim::Adam &opt, HookRegistry &hooks, RunLogger &log, torch::Device device,
           int64_t epochs, int64_t steps) {
  field->train();
  auto psnr_of = [](const auto &mse) {
    // BUG(torch-host-sync-in-loop): the step loop calls this generic lambda
    // on every step; it reads the loss back.
    return -10.0 * std::log10(mse.template item<double>());
  };
  double last_psnr = 0.0;
  int64_t it = 0;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    EpochStats stats{torch::zeros({}, device), torch::zeros({}, device)};
    for (int64_t s = 0; s < steps; ++s, ++it) {
      auto rays = sample_rays(kRays, device);
      opt.zero_grad();
      auto loss = F::mse_loss(composite(field, rays.origins, rays.dirs, true), rays.rgb);
      loss.backward();
      opt.step();
      record(stats, loss);
      last_psnr = psnr_of(loss);
      log.step(it, loss);
      hooks.run(it);
    }
    // OK(torch-host-sync-in-loop): once per epoch, outside the step loop.
    std::cout << "epoch " << epoch << " mse " << stats.photometric.item<double>() / static_cast<double>(stats.steps)
              << " psnr " << stats.psnr_sum.item<double>() / static_cast<double>(stats.steps) << " (last step "
              << last_psnr << ")\n";
  }
}

int main() {
  torch::manual_seed(236);
  const torch::Device device = pick_device();
  RadianceField field(128);
  field->to(device);
  torch::optim::Adam opt(field->parameters(), torch::optim::AdamOptions(5e-4));

  HookRegistry hooks;
  hooks.add("lr-decay", [&opt](int64_t it) {
    if (it > 0 && it % 2000 == 0)
      for (auto &group : opt.param_groups())
        static_cast<torch::optim::AdamOptions &>(group.options())
            .lr(static_cast<torch::optim::AdamOptions &>(group.options()).lr() * 0.5);
  });
  hooks.add("share-with-viewer", [](int64_t) {
    // BUG(torch-empty-cache-in-loop): the registry runs this hook after
    // every training step.
    c10::cuda::CUDACachingAllocator::emptyCache();
  });

  RunLogger log("turntable-shoe");
  train(field, opt, hooks, log, device, 6, 1000);

  // OK(torch-empty-cache-in-loop): once, between training and rendering.
  c10::cuda::CUDACachingAllocator::emptyCache();
  field->eval();
  auto image = retry_on_oom([&] { return render_view(field, 0.3, device, 4096); }, 3);
  std::cout << "held-out view " << image.sizes() << " mean colour " << image.reshape({-1, 3}).mean(0) << '\n';
}
