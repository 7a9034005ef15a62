// Retinal vessel segmentation on fundus photographs: the green channel is cut
// into 48x48 patches and a small encoder-decoder (stages of two conv blocks,
// each block with batch norm) predicts the vessel mask. A VesselTrainer owns
// the network and its optimizer: fit() alternates train_epoch() and
// validate() with early stopping on the validation Dice and keeps the best
// weights on disk; adapt() fine-tunes on a second camera. Deployment reloads
// the best weights into a fresh network and segments whole images by tiles;
// a learnable matched filter (no normalisation) is the classical baseline.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kPatch = 48;

struct Patches {
  torch::Tensor image;  // [B, 1, 48, 48] green channel, CLAHE-normalised
  torch::Tensor mask;   // [B, 1, 48, 48] vessel = 1
};

namespace fundus {
// Synthetic patches: dark curved vessels on a bright, noisy background.
Patches synth(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto ys = torch::linspace(-1, 1, kPatch).view({1, 1, kPatch, 1});
  auto xs = torch::linspace(-1, 1, kPatch).view({1, 1, 1, kPatch});
  auto bend = torch::rand({n, 1, 1, 1}, gen) * 2 - 1;
  auto shift = torch::rand({n, 1, 1, 1}, gen) * 0.6 - 0.3;
  auto mask = ((ys - bend * xs * xs - shift).abs() < 0.06).to(torch::kFloat);
  auto image = 0.8 - 0.5 * mask + 0.05 * torch::randn({n, 1, kPatch, kPatch}, gen);
  return {image, mask};
}
}  // namespace fundus

struct ConvBlockImpl : nn::Module {
  ConvBlockImpl(int64_t in, int64_t out)
      : conv(register_module("conv", nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1).bias(false)))),
        bn(register_module("bn", nn::BatchNorm2d(out))) {}
  torch::Tensor forward(const torch::Tensor &x) { return torch::relu(bn->forward(conv->forward(x))); }
  nn::Conv2d conv;
  nn::BatchNorm2d bn;
};
TORCH_MODULE(ConvBlock);

struct StageImpl : nn::Module {
  StageImpl(int64_t in, int64_t out)
      : first(register_module("first", ConvBlock(in, out))), second(register_module("second", ConvBlock(out, out))) {}
  torch::Tensor forward(const torch::Tensor &x) { return second->forward(first->forward(x)); }
  ConvBlock first, second;
};
TORCH_MODULE(Stage);

struct VesselNetImpl : nn::Module {
  VesselNetImpl()
      : down1(register_module("down1", Stage(1, 16))),
        down2(register_module("down2", Stage(16, 32))),
        up(register_module("up", Stage(48, 16))),
        head(register_module("head", nn::Conv2d(nn::Conv2dOptions(16, 1, 1)))) {}
  torch::Tensor forward(const torch::Tensor &x) {
    auto s1 = down1->forward(x);
    auto s2 = down2->forward(F::max_pool2d(s1, F::MaxPool2dFuncOptions(2)));
    auto u = s2.repeat_interleave(2, 2).repeat_interleave(2, 3);
    return head->forward(up->forward(torch::cat({u, s1}, 1)));
  }
  Stage down1, down2, up;
  nn::Conv2d head;
};
TORCH_MODULE(VesselNet);

// Chaudhuri-style matched filter with a learnable 9x9 kernel.
struct MatchedFilterImpl : nn::Module {
  MatchedFilterImpl() : kernel(register_module("kernel", nn::Conv2d(nn::Conv2dOptions(1, 1, 9).padding(4)))) {}
  torch::Tensor forward(const torch::Tensor &x) { return kernel->forward(-x); }
  nn::Conv2d kernel;
};
TORCH_MODULE(MatchedFilter);

double dice_at(const torch::Tensor &logits, const torch::Tensor &mask, double threshold) {
  auto pred = (logits > threshold).to(torch::kFloat);
  const double inter = (pred * mask).sum().item<double>();
  return (2.0 * inter + 1.0) / ((pred.sum() + mask.sum()).item<double>() + 1.0);
}

torch::Tensor soft_dice_loss(const torch::Tensor &logits, const torch::Tensor &mask) {
  auto p = torch::sigmoid(logits);
  return 1 - (2 * (p * mask).sum() + 1) / (p.sum() + mask.sum() + 1);
}

struct TrainConfig {
  double lr = 1e-3;
  int max_epochs = 30;
  int patience = 4;
  std::string checkpoint = "vessel_best.pt";
};

class VesselTrainer {
 public:
  VesselTrainer(VesselNet model, TrainConfig cfg)
      : model_(std::move(model)), cfg_(std::move(cfg)),
        opt_(model_->parameters(), torch::optim::AdamOptions(cfg_.lr)) {}

  // Stops after `patience` epochs without a better validation Dice.
  int fit(const std::vector<Patches> &train, const std::vector<Patches> &val) {
    double best = -1.0;
    int stale = 0;
    for (int epoch = 0; epoch < cfg_.max_epochs; ++epoch) {
      const double loss = train_epoch(train);
      const double dice = validate(val);
      std::cout << "epoch " << epoch << " loss " << loss << " dice " << dice << '\n';
      if (dice > best) {
        best = dice;
        stale = 0;
        torch::save(model_, cfg_.checkpoint);
      } else if (++stale == cfg_.patience) {
        return epoch + 1;
      }
    }
    return cfg_.max_epochs;
  }

  double validate(const std::vector<Patches> &val) {
    model_->eval();
    torch::NoGradGuard no_grad;
    double sum = 0.0;
    for (const auto &p : val)
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and the guard above.
      sum += dice_at(model_->forward(p.image), p.mask, 0.0);
    return sum / static_cast<double>(val.size());
  }

  // A few steps on labelled patches from another fundus camera.
  void adapt(const std::vector<Patches> &site, int64_t steps) {
    for (int64_t s = 0; s < steps; ++s) {
      const auto &p = site[static_cast<size_t>(s) % site.size()];
      opt_.zero_grad();
      // BUG(torch-eval-mode-missing): main() ran validate() on the test set
      // just before, which left eval() on: this fine-tunes with frozen BN.
      auto loss = F::binary_cross_entropy_with_logits(model_->forward(p.image), p.mask);
      loss.backward();
      opt_.step();
    }
  }

 private:
  torch::Tensor step(const Patches &p) {
    opt_.zero_grad();
    auto logits = model_->forward(p.image);
    auto loss = F::binary_cross_entropy_with_logits(logits, p.mask) + soft_dice_loss(logits, p.mask);
    loss.backward();
    opt_.step();
    return loss;
  }

  double train_epoch(const std::vector<Patches> &train) {
    // OK(torch-eval-mode-missing): validate() left eval() on; this switches back.
    model_->train();
    const size_t first = curve_.size();
    for (const auto &p : train)
      // BUG(torch-loss-accumulation-graph): step() returns the loss with its
      // graph, and the member curve keeps every step's graph alive.
      curve_.push_back(step(p));
    auto epoch_curve = std::vector<torch::Tensor>(curve_.begin() + static_cast<std::ptrdiff_t>(first), curve_.end());
    return torch::stack(epoch_curve).mean().item<double>();
  }

  VesselNet model_;
  TrainConfig cfg_;
  torch::optim::Adam opt_;
  std::vector<torch::Tensor> curve_;
};

void fit_filter(MatchedFilter &filter, const std::vector<Patches> &train) {
  torch::optim::SGD opt(filter->parameters(), torch::optim::SGDOptions(0.05));
  for (int epoch = 0; epoch < 5; ++epoch)
    for (const auto &p : train) {
      opt.zero_grad();
      auto loss = F::binary_cross_entropy_with_logits(filter->forward(p.image), p.mask);
      loss.backward();
      opt.step();
    }
}

// Segments a whole image (sides multiples of 48) as one batch of tiles.
torch::Tensor segment_image(VesselNet net, const torch::Tensor &image) {
  torch::NoGradGuard no_grad;
  auto tiles = image.unfold(0, kPatch, kPatch).unfold(1, kPatch, kPatch);  // [r, c, 48, 48]
  const int64_t rows = tiles.size(0), cols = tiles.size(1);
  auto batch = tiles.reshape({rows * cols, 1, kPatch, kPatch});
  // BUG(torch-eval-mode-missing): `deployed` is a fresh network: its
  // constructor left it in training mode and torch::load() only loads weights.
  auto probs = torch::sigmoid(net->forward(batch));
  return probs.view({rows, cols, kPatch, kPatch}).permute({0, 2, 1, 3}).reshape({rows * kPatch, cols * kPatch});
}

// Picks the logit threshold with the best validation Dice.
double tune_threshold(VesselNet &net, const std::vector<Patches> &val) {
  net->eval();
  double best_t = 0.0, best_dice = -1.0;
  for (double t = -2.0; t <= 2.0; t += 0.5) {
    double dice = 0.0;
    for (const auto &p : val)
      // BUG(torch-inference-without-no-grad): a threshold sweep never trains
      // and nothing here or in main() disables autograd.
      // OK(torch-eval-mode-missing): eval() above.
      dice += dice_at(net->forward(p.image), p.mask, t);
    if (dice > best_dice)
      best_dice = dice, best_t = t;
  }
  return best_t;
}

int main() {
  torch::manual_seed(260);
  std::vector<Patches> train, val, test, site_b;
  for (uint64_t i = 0; i < 24; ++i)
    train.push_back(fundus::synth(16, i));
  for (uint64_t i = 0; i < 4; ++i) {
    val.push_back(fundus::synth(16, 100 + i));
    test.push_back(fundus::synth(16, 200 + i));
    site_b.push_back(fundus::synth(8, 300 + i));
  }
  TrainConfig cfg;
  VesselNet net;
  VesselTrainer trainer(net, cfg);
  const int epochs = trainer.fit(train, val);
  std::cout << "stopped after " << epochs << " epochs, test Dice " << trainer.validate(test) << '\n';
  trainer.adapt(site_b, 40);
  std::cout << "threshold after adaptation " << tune_threshold(net, val) << '\n';

  MatchedFilter filter;
  fit_filter(filter, train);
  {
    torch::NoGradGuard no_grad;
    double dice = 0.0;
    for (const auto &p : test)
      // OK(torch-eval-mode-missing): the matched filter has no dropout or batch norm.
      dice += dice_at(filter->forward(p.image), p.mask, 0.0);
    std::cout << "matched filter Dice " << dice / static_cast<double>(test.size()) << '\n';
  }

  // Deployment: the best checkpoint in a fresh network, on the GPU if any.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  VesselNet deployed;
  torch::load(deployed, cfg.checkpoint);
  deployed->to(device);
  auto image = 0.8 - 0.4 * torch::rand({4 * kPatch, 6 * kPatch});
  // BUG(torch-tensor-to-discarded): the moved copy is dropped; `image` stays on the CPU.
  image.to(device);
  // BUG(torch-device-mismatch): segment_image() runs the network on `device`
  // on a tensor left on the CPU.
  auto vessels = segment_image(deployed, image);
  std::cout << "vessel fraction " << (vessels > 0.5).to(torch::kFloat).mean().item<double>() << '\n';
}
