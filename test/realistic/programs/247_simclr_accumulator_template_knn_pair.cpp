// SimCLR pretraining of a small CNN on unlabeled 16x16 texture patches
// (two augmented views per patch, NT-Xent loss), with a kNN monitor on a
// labelled bank, a short supervised fine-tune, a collapse check of the
// embeddings, and a linear probe on the frozen encoder. Large effective
// batches come from an Accumulator class template that steps once every N
// micro-batches. The probe's optimizer comes from a factory (SGD or Adam).
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define SSL_AMP(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#else
#define SSL_AMP(on) at::autocast::set_enabled(on)
#endif

constexpr int64_t kSide = 16, kEmbed = 64, kProj = 32, kClasses = 5;
constexpr double kLossScale = 512.0;

static const auto kPinnedHost = torch::TensorOptions().dtype(torch::kFloat).pinned_memory(true);

struct EncoderImpl : torch::nn::Module {
  EncoderImpl()
      : body(register_module(
            "body", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)),
                                          torch::nn::BatchNorm2d(32), torch::nn::ReLU(), torch::nn::MaxPool2d(2),
                                          torch::nn::Conv2d(torch::nn::Conv2dOptions(32, kEmbed, 3).padding(1)),
                                          torch::nn::BatchNorm2d(kEmbed), torch::nn::ReLU(),
                                          torch::nn::AdaptiveAvgPool2d(1)))) {}
  torch::Tensor forward(const torch::Tensor &x) { return body->forward(x).flatten(1); }
  torch::nn::Sequential body;
};
TORCH_MODULE(Encoder);

struct PretrainConfig {
  int64_t steps = 400, batch = 32, accum = 4;
  double lr = 0.3, tau = 0.2;
  uint32_t seed = 247;
};

struct ProbeConfig {
  bool use_adam = false;
  double lr = 0.05;
  int64_t epochs = 10;
};

// Steps its optimizer once every `every` micro-batches.
template <typename Opt>
class Accumulator {
 public:
  Accumulator(Opt &opt, int64_t every) : opt_(opt), every_(every) {}
  bool tick() {
    if (++count_ % every_ != 0)
      return false;
    opt_.step();
    opt_.zero_grad();
    return true;
  }
 private:
  Opt &opt_;
  int64_t every_;
  int64_t count_ = 0;
};

// Patches of oriented stripes, two random crops (rolls), flips and noise each.
torch::Tensor two_views(std::mt19937 &rng, int64_t batch) {
  auto freq = torch::rand({batch, 1, 1, 1}) * 3.0 + 0.5;
  auto grid = torch::linspace(0, 6.2831853, kSide).view({1, 1, 1, kSide});
  auto patches = torch::sin(freq * grid).expand({batch, 3, kSide, kSide}).contiguous();
  std::vector<torch::Tensor> views;
  for (int v = 0; v < 2; ++v) {
    auto view = patches.roll({static_cast<int64_t>(rng() % 5), static_cast<int64_t>(rng() % 5)}, {2, 3});
    if (rng() % 2)
      view = view.flip({3});
    views.push_back(view + 0.1 * torch::randn({batch, 3, kSide, kSide}));
  }
  return torch::cat(views);
}

void pretrain(Encoder &enc, torch::nn::Sequential &proj, const PretrainConfig &cfg, torch::Device device) {
  enc->train();
  proj->train();
  auto params = enc->parameters(), extra = proj->parameters();
  params.insert(params.end(), extra.begin(), extra.end());
  torch::optim::SGD opt(params, torch::optim::SGDOptions(cfg.lr).momentum(0.9).weight_decay(1e-6));
  Accumulator<torch::optim::SGD> accumulate(opt, cfg.accum);
  auto nt_xent = [tau = cfg.tau](const auto &z) {
    auto zn = F::normalize(z, F::NormalizeFuncOptions().dim(1));
    const int64_t n = zn.size(0);
    auto sim = zn.matmul(zn.t()) / tau;
    sim = sim.masked_fill(torch::eye(n, sim.options().dtype(torch::kBool)), -1e9);
    auto positives = (torch::arange(n, sim.options().dtype(torch::kLong)) + n / 2) % n;
    return F::cross_entropy(sim, positives);
  };
  auto upload = [device](const auto &host) { return host.to(device, /*non_blocking=*/true); };
  std::mt19937 rng(cfg.seed);
  opt.zero_grad();
  for (int64_t i = 0; i < cfg.steps * cfg.accum; ++i) {
    auto views = two_views(rng, cfg.batch);
    // BUG(torch-non-blocking-pageable): two_views() builds the views in
    // pageable memory; upload() asks for a non_blocking copy.
    auto x = upload(views);
    auto loss = nt_xent(proj->forward(enc->forward(x)));
    // BUG(torch-grad-accumulation-unscaled): the Accumulator steps once
    // every cfg.accum micro-batches; the mean NT-Xent losses add up.
    loss.backward();
    accumulate.tick();
  }
}

std::pair<torch::Tensor, int64_t> knn_top1(Encoder &enc, const torch::Tensor &bank_x, const torch::Tensor &bank_y,
                                           const torch::Tensor &query_x, const torch::Tensor &query_y) {
  torch::NoGradGuard no_grad;
  enc->eval();
  auto bank = F::normalize(enc->forward(bank_x), F::NormalizeFuncOptions().dim(1));
  auto query = F::normalize(enc->forward(query_x), F::NormalizeFuncOptions().dim(1));
  auto nearest = query.matmul(bank.t()).argmax(1);
  auto correct = bank_y.index_select(0, nearest).eq(query_y).sum();
  return {correct.to(torch::kCPU, /*non_blocking=*/true), query_x.size(0)};
}

struct LabeledBatch { torch::Tensor x, y; };

void finetune(Encoder &enc, torch::nn::Linear &head, const std::vector<LabeledBatch> &batches, bool amp) {
  enc->train();
  auto params = enc->parameters(), extra = head->parameters();
  params.insert(params.end(), extra.begin(), extra.end());
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.01).momentum(0.9));
  auto step_fn = [&](const LabeledBatch &b) {
    auto loss = F::cross_entropy(head->forward(enc->forward(b.x)), b.y);
    // BUG(torch-autocast-region): finetune() calls this inside the autocast
    // region that spans its whole epoch loop.
    (loss * kLossScale).backward();
    for (auto &p : params)
      if (p.grad().defined())
        p.grad().div_(kLossScale);
    // OK(torch-missing-zero-grad): the loop below drops every gradient
    // (sets it to none) right after the step.
    opt.step();
    for (auto &p : params)
      p.mutable_grad() = torch::Tensor();
  };
  if (amp)
    SSL_AMP(true);
  for (int epoch = 0; epoch < 3; ++epoch)
    for (const auto &b : batches)
      step_fn(b);
  if (amp)
    SSL_AMP(false);
}

// Synchronises the device when it goes out of scope.
struct DeviceFence {
  ~DeviceFence() { if (torch::cuda::is_available()) torch::cuda::synchronize(); }
};

void embedding_report(Encoder &enc, const torch::Tensor &anchors) {
  torch::NoGradGuard no_grad;
  enc->eval();
  auto z = F::normalize(enc->forward(anchors), F::NormalizeFuncOptions().dim(1));
  torch::Tensor spread;
  {
    DeviceFence fence;
    spread = z.std(0).mean().to(torch::kCPU, /*non_blocking=*/true);
  }
  // OK(torch-non-blocking-d2h-race): the fence synchronised at the end of its scope.
  if (spread.item<double>() < 1e-3)
    std::cerr << "warning: embeddings collapsed\n";
  auto sim = z.matmul(z.t()).to(torch::kCPU, /*non_blocking=*/true);
  auto print_row = [&sim](int64_t i) {
    // BUG(torch-non-blocking-d2h-race): every call comes right after the
    // copy, with no synchronisation in between.
    auto row = sim.accessor<float, 2>()[i];
    std::cout << row[0] << ' ' << row[1] << ' ' << row[2] << ' ' << row[3] << '\n';
  };
  for (int64_t i = 0; i < 4; ++i)
    print_row(i);
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const ProbeConfig &cfg, std::vector<torch::Tensor> params) {
  if (cfg.use_adam)
    return std::make_unique<torch::optim::Adam>(std::move(params), torch::optim::AdamOptions(cfg.lr));
  return std::make_unique<torch::optim::SGD>(std::move(params), torch::optim::SGDOptions(cfg.lr).momentum(0.9));
}

// Clips the probe's gradients; drops them when they are not finite.
bool sanitize_grads(torch::nn::Linear &probe, torch::optim::Optimizer &opt) {
  const double norm = torch::nn::utils::clip_grad_norm_(probe->parameters(), 5.0);
  if (!std::isfinite(norm)) {
    opt.zero_grad();
    return false;
  }
  return true;
}

void linear_probe(Encoder &enc, const std::vector<LabeledBatch> &batches, const ProbeConfig &cfg,
                  torch::Device device) {
  enc->eval();
  torch::nn::Linear probe(kEmbed, kClasses);
  probe->to(device);
  auto opt = make_optimizer(cfg, probe->parameters());
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    for (const auto &b : batches) {
      torch::Tensor feats;
      {
        torch::NoGradGuard no_grad;
        feats = enc->forward(b.x);
      }
      auto loss = F::cross_entropy(probe->forward(feats), b.y);
      loss.backward();
      if (sanitize_grads(probe, *opt))
        // BUG(torch-missing-zero-grad): gradients are only dropped on the
        // non-finite path; every finite step keeps them for the next batch.
        opt->step();
    }
  }
}

int main() {
  torch::manual_seed(247);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Encoder enc;
  torch::nn::Sequential proj(torch::nn::Linear(kEmbed, 128), torch::nn::ReLU(), torch::nn::Linear(128, kProj));
  enc->to(device);
  proj->to(device);
  PretrainConfig cfg;
  pretrain(enc, proj, cfg, device);

  std::mt19937 rng(7);
  auto bank_host = torch::empty({200, 3, kSide, kSide}, kPinnedHost);
  bank_host.copy_(two_views(rng, 100));
  // OK(torch-non-blocking-pageable): the bank is staged in pinned memory.
  auto bank_x = bank_host.to(device, /*non_blocking=*/true);
  auto bank_y = torch::randint(0, kClasses, {200}, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto query_x = bank_x.slice(0, 0, 50) + 0.05 * torch::randn({50, 3, kSide, kSide}, device);
  auto query_y = bank_y.slice(0, 0, 50);
  auto [correct, total] = knn_top1(enc, bank_x, bank_y, query_x, query_y);
  // BUG(torch-non-blocking-d2h-race): the pair's first element is the copy
  // knn_top1() only started.
  std::cout << "kNN top-1 " << static_cast<double>(correct.item<int64_t>()) / static_cast<double>(total) << '\n';

  std::vector<LabeledBatch> labeled;
  for (int64_t i = 0; i < 4; ++i)
    labeled.push_back({bank_x.slice(0, i * 50, (i + 1) * 50), bank_y.slice(0, i * 50, (i + 1) * 50)});
  torch::nn::Linear head(kEmbed, kClasses);
  head->to(device);
  finetune(enc, head, labeled, torch::cuda::is_available());
  embedding_report(enc, query_x);
  linear_probe(enc, labeled, ProbeConfig{}, device);
}
