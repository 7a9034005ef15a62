// Binary segmentation with a small U-Net: a dataset of (image, mask)
// samples, a trainer that stages images through a pinned buffer, a Dice
// loss, and an end-of-epoch hook.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <vector>

struct SegConfig {
  int64_t epochs = 5;
  int64_t batch = 8;
  int64_t size = 64;
  int64_t classes = 2;
  int64_t log_every = 20;
};

struct Sample {
  torch::Tensor image;  // [B, 3, H, W] float
  torch::Tensor mask;   // [B, H, W] long
};

class SegmentationSet {
 public:
  SegmentationSet(const SegConfig &cfg, int64_t n) {
    for (int64_t i = 0; i < n; ++i)
      samples_.push_back({torch::rand({cfg.batch, 3, cfg.size, cfg.size}),
                          torch::randint(0, cfg.classes, {cfg.batch, cfg.size, cfg.size}, torch::kLong)});
  }
  const std::vector<Sample> &samples() const { return samples_; }

 private:
  std::vector<Sample> samples_;
};

torch::nn::Sequential double_conv(int64_t in, int64_t out) {
  return torch::nn::Sequential(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1)), torch::nn::ReLU(),
      torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1)), torch::nn::ReLU());
}

struct UNetImpl : torch::nn::Module {
  explicit UNetImpl(int64_t classes)
      : down1(register_module("down1", double_conv(3, 16))),
        down2(register_module("down2", double_conv(16, 32))),
        up(register_module("up", torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(32, 16, 2).stride(2)))),
        fuse(register_module("fuse", double_conv(32, 16))),
        head(register_module("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, classes, 1)))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto s1 = down1->forward(x);
    auto s2 = down2->forward(torch::max_pool2d(s1, 2));
    auto u = up(s2);
    return head(fuse->forward(torch::cat({u, s1}, 1)));
  }
  torch::nn::Sequential down1, down2;
  torch::nn::ConvTranspose2d up;
  torch::nn::Sequential fuse;
  torch::nn::Conv2d head;
};
TORCH_MODULE(UNet);

// Soft Dice over the classes; the per-class terms are summed and returned.
torch::Tensor dice_loss(const torch::Tensor &logits, const torch::Tensor &mask, int64_t classes) {
  auto probs = logits.softmax(1);
  auto total = torch::zeros({}, logits.options());
  for (int64_t c = 0; c < classes; ++c) {
    auto p = probs.select(1, c);
    auto t = mask.eq(c).to(p.dtype());
    auto dice = 1 - (2 * (p * t).sum() + 1) / (p.sum() + t.sum() + 1);
    // OK(torch-loss-accumulation-graph): a loss function summing per-class
    // terms; the sum is returned and no backward() runs in this loop.
    total += dice;
  }
  return total / classes;
}

class SegTrainer {
 public:
  SegTrainer(const SegConfig &cfg, torch::Device device)
      : cfg_(cfg), device_(device), model_(cfg.classes),
        staging_(torch::empty({cfg.batch, 3, cfg.size, cfg.size},
                              torch::TensorOptions().pinned_memory(true))) {
    model_->to(device_);
    optimizer_ = std::make_unique<torch::optim::Adam>(model_->parameters(), torch::optim::AdamOptions(1e-3));
  }

  void fit(const SegmentationSet &data) {
    for (int64_t epoch = 0; epoch < cfg_.epochs; ++epoch) {
      int64_t step = 0;
      for (const auto &s : data.samples()) {
        staging_.copy_(s.image);
        // OK(torch-non-blocking-pageable): staging_ is pinned.
        auto image = staging_.to(device_, /*non_blocking=*/true);
        auto mask = s.mask.to(device_);
        auto logits = model_->forward(image);
        auto loss = torch::nn::functional::cross_entropy(logits, mask) +
                    dice_loss(logits, mask, cfg_.classes);
        optimizer_->zero_grad();
        loss.backward();
        optimizer_->step();
        if (++step % cfg_.log_every == 0)
          std::cout << "epoch " << epoch << " step " << step << " loss " << loss.item<double>() << '\n';
      }
      on_epoch_end();
    }
  }

  // Fine-tuning pass on hard samples, straight from the dataset.
  void fit_hard(const std::vector<Sample> &hard) {
    for (const auto &s : hard) {
      // BUG(torch-non-blocking-pageable): the sample's image comes from
      // torch::rand (pageable); non_blocking does nothing here.
      auto image = s.image.to(device_, /*non_blocking=*/true);
      auto loss = torch::nn::functional::cross_entropy(model_->forward(image), s.mask.to(device_));
      optimizer_->zero_grad();
      loss.backward();
      optimizer_->step();
    }
  }

 private:
  void on_epoch_end() {
    // BUG(torch-empty-cache-in-loop): fit() calls this once per epoch; the
    // next epoch has to cudaMalloc every block again.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

  SegConfig cfg_;
  torch::Device device_;
  UNet model_;
  torch::Tensor staging_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
};

int main() {
  SegConfig cfg;
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  SegmentationSet train_set(cfg, 32);
  SegTrainer trainer(cfg, device);
  trainer.fit(train_set);
  std::vector<Sample> hard(train_set.samples().begin(), train_set.samples().begin() + 4);
  trainer.fit_hard(hard);
  return 0;
}
