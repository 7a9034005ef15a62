// Lesion segmentation on FLAIR MRI slices for a multi-site study: a small
// U-Net (two encoder stages, one transposed-convolution decoder stage) with
// batch norm in every block, trained as a 3-fold ensemble with gradient
// accumulation because the site GPUs are small. The ensemble's mask is the
// mean of the folds' probabilities; before a new site joins, the first fold
// is fine-tuned on a handful of its annotated slices, and the lesion load
// of the site's reference volume is measured slab by slab. Slices are
// synthesised (disks on noise) so the program runs on its own.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kSide = 64;

struct SegConfig {
  int64_t base = 16;
  std::optional<double> head_dropout;
  int64_t accum_steps = 4;
  double lr = 1e-3;
};

struct SegNetImpl : torch::nn::Module {
  static torch::nn::Sequential block(int64_t in, int64_t out) {
    return torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1)),
                                 torch::nn::BatchNorm2d(out), torch::nn::ReLU(),
                                 torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1)),
                                 torch::nn::BatchNorm2d(out), torch::nn::ReLU());
  }

  explicit SegNetImpl(const SegConfig &cfg)
      : down1(register_module("down1", block(1, cfg.base))),
        down2(register_module("down2", block(cfg.base, 2 * cfg.base))),
        up(register_module("up", torch::nn::ConvTranspose2d(
                                     torch::nn::ConvTranspose2dOptions(2 * cfg.base, cfg.base, 2).stride(2)))),
        fuse(register_module("fuse", block(2 * cfg.base, cfg.base))),
        head(register_module("head", torch::nn::Sequential())) {
    if (cfg.head_dropout)
      head->push_back(torch::nn::Dropout2d(*cfg.head_dropout));
    head->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(cfg.base, 1, 1)));
  }

  // x [B, 1, H, W] -> lesion logits [B, 1, H, W]
  torch::Tensor forward(const torch::Tensor &x) {
    auto d1 = down1->forward(x);
    auto d2 = down2->forward(F::max_pool2d(d1, F::MaxPool2dFuncOptions(2)));
    return head->forward(fuse->forward(torch::cat({up->forward(d2), d1}, 1)));
  }

  torch::nn::Sequential down1, down2;
  torch::nn::ConvTranspose2d up;
  torch::nn::Sequential fuse, head;
};
TORCH_MODULE(SegNet);

struct Slices {
  torch::Tensor image, mask;  // [B, 1, H, W] each
};

Slices synth_slices(int64_t n, std::mt19937 &rng) {
  std::uniform_real_distribution<double> centre(12.0, 52.0), radius(3.0, 10.0);
  auto yy = torch::arange(kSide, torch::kFloat).view({kSide, 1}).expand({kSide, kSide});
  auto xx = torch::arange(kSide, torch::kFloat).view({1, kSide}).expand({kSide, kSide});
  Slices s{0.2 * torch::randn({n, 1, kSide, kSide}), torch::zeros({n, 1, kSide, kSide})};
  for (int64_t i = 0; i < n; ++i) {
    const double cy = centre(rng), cx = centre(rng), r = radius(rng);
    auto disk = ((yy - cy).pow(2) + (xx - cx).pow(2) < r * r).to(torch::kFloat);
    s.mask[i][0].copy_(disk);
    s.image[i][0].add_(0.8 * disk);
  }
  return s;
}

torch::Tensor soft_dice(const torch::Tensor &prob, const torch::Tensor &mask) {
  auto inter = (prob * mask).sum();
  return (2.0 * inter + 1.0) / (prob.sum() + mask.sum() + 1.0);
}

template <typename Batches>
double mean_dice(SegNet &net, const Batches &batches, torch::Device device) {
  net->eval();
  torch::NoGradGuard no_grad;
  double sum = 0.0;
  int64_t n = 0;
  for (const auto &b : batches) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval()
    // and the guard above.
    auto prob = torch::sigmoid(net->forward(b.image.to(device)));
    sum += soft_dice(prob, b.mask.to(device)).template item<double>();
    ++n;
  }
  net->train();
  return sum / static_cast<double>(std::max<int64_t>(n, 1));
}

double train_fold(SegNet &net, const SegConfig &cfg, const std::vector<Slices> &train, const std::vector<Slices> &val,
                  torch::Device device) {
  net->to(device);
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(cfg.lr));
  double best = 0.0;
  for (int epoch = 0; epoch < 6; ++epoch) {
    opt.zero_grad();
    for (size_t i = 0; i < train.size(); ++i) {
      auto logits = net->forward(train[i].image.to(device));
      auto loss = F::binary_cross_entropy_with_logits(logits, train[i].mask.to(device));
      // BUG(torch-grad-accumulation-unscaled): the mean loss of each
      // micro-batch is summed cfg.accum_steps times before the step.
      loss.backward();
      if ((i + 1) % static_cast<size_t>(cfg.accum_steps) == 0) {
        opt.step();
        opt.zero_grad();
      }
    }
    best = std::max(best, mean_dice(net, val, device));
  }
  return best;
}

// Quick visual QA of one fold: the predicted mask of one slice, saved.
void save_overlay(SegNet net, const Slices &s, torch::Device device, const std::string &path) {
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): mean_dice() put the fold back in train()
  // at the end of train_fold(); batch norm uses this one slice's statistics.
  auto mask = (net->forward(s.image.narrow(0, 0, 1).to(device)) > 0.0).to(torch::kUInt8).cpu();
  torch::save(mask, path);
}

torch::Tensor ensemble_mask(std::vector<SegNet> &folds, const torch::Tensor &volume, torch::Device device) {
  for (auto &net : folds)
    net->eval();
  torch::NoGradGuard no_grad;
  auto x = volume.unsqueeze(1);
  // BUG(torch-tensor-to-discarded): the moved copy is dropped; x stays on
  // the CPU.
  x.to(device);
  auto prob = torch::zeros_like(x);
  for (auto &net : folds) {
    // BUG(torch-device-mismatch): every fold was moved to `device` by
    // train_fold(); x is still a CPU tensor.
    // OK(torch-eval-mode-missing): eval() on every fold above.
    prob += torch::sigmoid(net->forward(x));
  }
  return prob / static_cast<double>(folds.size()) > 0.5;
}

void finetune_site(SegNet &net, const std::vector<Slices> &site, torch::Device device) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-4).momentum(0.9));
  for (int round = 0; round < 3; ++round) {
    for (const auto &b : site) {
      opt.zero_grad();
      // BUG(torch-eval-mode-missing): ensemble_mask() switched every fold
      // to eval(); this fine-tune never sees batch statistics.
      auto loss = F::binary_cross_entropy_with_logits(net->forward(b.image.to(device)), b.mask.to(device));
      loss.backward();
      opt.step();
    }
  }
}

// Voxels predicted as lesion, slab by slab so a whole volume never sits on
// the GPU at once.
template <typename Predict>
int64_t lesion_voxels(const torch::Tensor &volume, int64_t slab, Predict &&predict) {
  int64_t voxels = 0;
  for (int64_t z = 0; z < volume.size(0); z += slab) {
    auto part = volume.narrow(0, z, std::min(slab, volume.size(0) - z)).unsqueeze(1);
    voxels += (predict(part) > 0.0).sum().template item<int64_t>();
  }
  return voxels;
}

int main() {
  torch::manual_seed(235);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  std::mt19937 rng(235);
  SegConfig cfg;
  cfg.head_dropout = 0.1;

  std::vector<SegNet> folds;
  for (int k = 0; k < 3; ++k) {
    std::vector<Slices> train, val;
    for (int i = 0; i < 24; ++i)
      train.push_back(synth_slices(4, rng));
    for (int i = 0; i < 4; ++i)
      val.push_back(synth_slices(8, rng));
    folds.push_back(SegNet(cfg));
    std::cout << "fold " << k << " best dice " << train_fold(folds.back(), cfg, train, val, device) << "\n";
  }
  save_overlay(folds.back(), synth_slices(1, rng), device, "fold2_overlay.pt");

  auto test_volume = synth_slices(32, rng).image.squeeze(1);
  auto mask = ensemble_mask(folds, test_volume, device);
  std::cout << "ensemble lesion voxels " << mask.sum().item<int64_t>() << "\n";

  std::vector<Slices> site;
  for (int i = 0; i < 6; ++i)
    site.push_back(synth_slices(4, rng));
  finetune_site(folds.front(), site, device);

  SegNet &adapted = folds.front();
  adapted->eval();
  auto site_volume = synth_slices(40, rng).image.squeeze(1);
  const int64_t voxels = lesion_voxels(site_volume, 8, [&](const torch::Tensor &part) {
    // BUG(torch-inference-without-no-grad): lesion_voxels() runs this once
    // per slab and nothing ever trains on it: no guard anywhere.
    // OK(torch-eval-mode-missing): eval() on the adapted fold just above.
    return adapted->forward(part.to(device));
  });
  std::cout << "site lesion load " << voxels << " voxels\n";
  return 0;
}
