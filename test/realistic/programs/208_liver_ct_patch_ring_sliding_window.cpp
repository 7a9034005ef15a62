// Liver and tumour segmentation in abdominal CT. A small 3D U-Net trains on
// random 32^3 patches cut from 64^3 resampled volumes; a sampler keeps a
// ring of three host staging batches it refills round-robin. Whole volumes
// are segmented by tiling them into patches (std::transform over the patch
// origins) and stitching the logits back on the host, both for validation
// Dice and for the label maps handed to the radiologists. Training uses
// CUDA autocast; the model runs on the workstation's second GPU.
#include <ATen/autocast_mode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kVol = 64, kPatch = 32, kClasses = 3, kBatch = 2;  // background, liver, tumour

nn::Sequential conv3(int64_t in, int64_t out) {
  return nn::Sequential(nn::Conv3d(nn::Conv3dOptions(in, out, 3).padding(1)), nn::BatchNorm3d(out), nn::ReLU());
}

struct UNet3dImpl : nn::Module {
  UNet3dImpl()
      : enc1(register_module("enc1", conv3(1, 16))),
        enc2(register_module("enc2", conv3(16, 32))),
        up(register_module("up", nn::ConvTranspose3d(nn::ConvTranspose3dOptions(32, 16, 2).stride(2)))),
        dec(register_module("dec", conv3(32, 16))),
        head(register_module("head", nn::Conv3d(nn::Conv3dOptions(16, kClasses, 1)))) {}

  torch::Tensor forward(const torch::Tensor &x) {
    auto e1 = enc1->forward(x);
    auto e2 = enc2->forward(torch::max_pool3d(e1, 2));
    return head->forward(dec->forward(torch::cat({up->forward(e2), e1}, 1)));
  }

  nn::Sequential enc1, enc2;
  nn::ConvTranspose3d up;
  nn::Sequential dec;
  nn::Conv3d head;
};
TORCH_MODULE(UNet3d);

struct CtCase {
  torch::Tensor hu;    // [1, 1, D, H, W], windowed and scaled to [0, 1]
  torch::Tensor mask;  // [D, H, W] int64
};

CtCase synthetic_case(std::mt19937 &rng) {
  std::uniform_real_distribution<double> u(-0.2, 0.2);
  auto g = torch::linspace(-1.0, 1.0, kVol);
  auto grids = torch::meshgrid({g, g, g}, "ij");
  auto r_liver = (grids[0] / 0.7).pow(2) + ((grids[1] - u(rng)) / 0.5).pow(2) + (grids[2] / 0.6).pow(2);
  auto r_tumour = (grids[0] - u(rng)).pow(2) + (grids[1] - u(rng)).pow(2) + (grids[2] - u(rng)).pow(2);
  auto mask = torch::zeros({kVol, kVol, kVol}, torch::kLong);
  mask.masked_fill_(r_liver < 1.0, 1);
  mask.masked_fill_((r_liver < 1.0) & (r_tumour < 0.04), 2);
  auto hu = 0.1 + 0.4 * mask.to(torch::kFloat) + 0.05 * torch::randn({kVol, kVol, kVol});
  return {hu.view({1, 1, kVol, kVol, kVol}), mask};
}

class PatchSampler {
 public:
  PatchSampler(std::vector<CtCase> cases, torch::Device device) : cases_(std::move(cases)), device_(device) {
    for (auto &slot : ring_)
      slot = torch::empty({kBatch, 1, kPatch, kPatch, kPatch});
  }

  std::pair<torch::Tensor, torch::Tensor> next() {
    std::uniform_int_distribution<int64_t> corner(0, kVol - kPatch);
    auto &slot = ring_[cursor_ % ring_.size()];
    auto labels = torch::empty({kBatch, kPatch, kPatch, kPatch}, torch::kLong);
    for (int64_t b = 0; b < kBatch; ++b) {
      const CtCase &c = cases_[(cursor_ * kBatch + static_cast<size_t>(b)) % cases_.size()];
      const int64_t z = corner(rng_), y = corner(rng_), x = corner(rng_);
      slot[b].copy_(c.hu[0].narrow(1, z, kPatch).narrow(2, y, kPatch).narrow(3, x, kPatch));
      labels[b].copy_(c.mask.narrow(0, z, kPatch).narrow(1, y, kPatch).narrow(2, x, kPatch));
    }
    ++cursor_;
    // BUG(torch-non-blocking-pageable): the ring slots come from torch::empty
    // without pinned_memory(true); the upload is synchronous anyway.
    auto images = slot.to(device_, /*non_blocking=*/true);
    return {images, labels.to(device_)};
  }

 private:
  std::vector<CtCase> cases_;
  torch::Device device_;
  std::array<torch::Tensor, 3> ring_;
  size_t cursor_ = 0;
  std::mt19937 rng_{208};
};

torch::Tensor soft_dice_loss(const torch::Tensor &logits, const torch::Tensor &labels) {
  auto probs = torch::softmax(logits, 1);
  auto onehot = torch::one_hot(labels, kClasses).permute({0, 4, 1, 2, 3}).to(probs.scalar_type());
  auto inter = (probs * onehot).sum({2, 3, 4});
  auto denom = (probs + onehot).sum({2, 3, 4});
  return 1.0 - ((2.0 * inter + 1.0) / (denom + 1.0)).mean();
}

// Tiles a [1, 1, D, H, W] volume into patches and stitches the logits on the host.
torch::Tensor sliding_window(UNet3d &net, const torch::Tensor &volume, torch::Device device) {
  std::vector<std::array<int64_t, 3>> origins;
  for (int64_t z = 0; z < kVol; z += kPatch)
    for (int64_t y = 0; y < kVol; y += kPatch)
      for (int64_t x = 0; x < kVol; x += kPatch)
        origins.push_back({z, y, x});
  std::vector<torch::Tensor> patch_logits(origins.size());
  std::transform(origins.begin(), origins.end(), patch_logits.begin(), [&](const std::array<int64_t, 3> &o) {
    auto patch = volume.narrow(2, o[0], kPatch).narrow(3, o[1], kPatch).narrow(4, o[2], kPatch).to(device);
    // BUG(torch-inference-without-no-grad): predict_cases() runs this for
    // every case without a guard (validate() holds one); each patch records
    // its activations for autograd.
    return net->forward(patch).cpu();
  });
  auto out = torch::zeros({1, kClasses, kVol, kVol, kVol});
  for (size_t i = 0; i < origins.size(); ++i) {
    const auto &o = origins[i];
    out.narrow(2, o[0], kPatch).narrow(3, o[1], kPatch).narrow(4, o[2], kPatch).copy_(patch_logits[i]);
  }
  return out;
}

void train_epoch(UNet3d &net, torch::optim::AdamW &opt, PatchSampler &sampler, int64_t steps) {
  net->train();
  for (int64_t s = 0; s < steps; ++s) {
    auto [images, labels] = sampler.next();
    opt.zero_grad();
    at::autocast::set_enabled(true);
    auto logits = net->forward(images);
    auto loss = F::cross_entropy(logits, labels) + soft_dice_loss(logits, labels);
    at::autocast::set_enabled(false);
    // BUG(torch-autocast-region): the loss comes out of a float16 autocast
    // region and is not scaled before backward(); small gradients flush to 0.
    loss.backward();
    opt.step();
  }
}

double validate(UNet3d &net, const std::vector<CtCase> &cases, torch::Device device) {
  torch::NoGradGuard no_grad;
  net->eval();
  std::vector<double> dice;
  for (const auto &c : cases) {
    auto pred = sliding_window(net, c.hu, device).argmax(1).squeeze(0);
    // OK(torch-device-mismatch): sliding_window stitches on the host, where
    // the reference mask lives.
    auto inter = ((pred > 0) & (c.mask > 0)).sum().item<double>();
    auto total = (pred > 0).sum().item<double>() + (c.mask > 0).sum().item<double>();
    dice.push_back(2.0 * inter / (total + 1e-6));
  }
  net->train();
  return std::accumulate(dice.begin(), dice.end(), 0.0) / static_cast<double>(dice.size());
}

void predict_cases(UNet3d &net, const std::vector<CtCase> &cases, torch::Device device, const std::string &dir) {
  net->eval();
  for (size_t i = 0; i < cases.size(); ++i) {
    auto labels = sliding_window(net, cases[i].hu, device).argmax(1);
    // BUG(torch-tensor-to-discarded): the uint8 copy is thrown away; the
    // int64 label map is saved, eight times the size.
    labels.to(torch::kByte);
    torch::save(labels, dir + "/case_" + std::to_string(i) + "_labels.pt");
    // BUG(torch-empty-cache-in-loop): returns the cached blocks after every
    // case, and the next case allocates them again.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
}

int main() {
  torch::manual_seed(208);
  if (!torch::cuda::is_available()) {
    std::cerr << "the 3D model needs a GPU\n";
    return 1;
  }
  // OK(torch-cuda-unguarded): is_available() was checked above.
  // BUG(torch-device-index-unchecked): the workstation's second card; the
  // ordinal is never compared with device_count().
  const torch::Device device(torch::kCUDA, 1);

  std::mt19937 rng(208);
  std::vector<CtCase> train_cases, val_cases;
  for (int i = 0; i < 12; ++i)
    train_cases.push_back(synthetic_case(rng));
  for (int i = 0; i < 3; ++i)
    val_cases.push_back(synthetic_case(rng));

  UNet3d net;
  net->to(device);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(2e-4).weight_decay(1e-5));
  PatchSampler sampler(train_cases, device);
  for (int epoch = 0; epoch < 20; ++epoch) {
    train_epoch(net, opt, sampler, 50);
    if (epoch % 5 == 4)
      std::cout << "epoch " << epoch << " val dice " << validate(net, val_cases, device) << "\n";
  }
  predict_cases(net, val_cases, device, "/tmp");
  return 0;
}
