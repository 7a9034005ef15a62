// Segments synthetic microscopy tiles (bright discs on a noisy background)
// with a small fully convolutional net with BatchNorm. One micro-batch of
// tiles fits in memory, so a lambda runs the forward and backward() of each
// micro-batch and the loop steps once the counter reaches the accumulation
// length. Mode switches go through helpers that take a torch::nn::Module&,
// and the Dice metric is a template over the model type. A second
// microscope's tiles are used for a short fine-tune.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>

constexpr int64_t kTile = 32;

struct SegNetImpl : torch::nn::Module {
  SegNetImpl()
      : net(register_module(
            "net", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)),
                                         torch::nn::BatchNorm2d(16), torch::nn::ReLU(),
                                         torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 16, 3).padding(1)),
                                         torch::nn::BatchNorm2d(16), torch::nn::ReLU(),
                                         torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 1, 1))))) {}
  torch::Tensor forward(torch::Tensor x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(SegNet);

struct Tiles {
  torch::Tensor images, masks;
  int64_t size() const { return images.size(0); }
};

// One disc per tile, radius 3-7; `contrast` models the microscope.
Tiles synth_tiles(int64_t n, double contrast, torch::Device device) {
  auto opts = torch::TensorOptions().device(device);
  auto cx = torch::randint(8, kTile - 8, {n, 1, 1, 1}, opts);
  auto cy = torch::randint(8, kTile - 8, {n, 1, 1, 1}, opts);
  auto r = torch::randint(3, 8, {n, 1, 1, 1}, opts);
  auto xs = torch::arange(kTile, opts).view({1, 1, 1, kTile});
  auto ys = torch::arange(kTile, opts).view({1, 1, kTile, 1});
  auto masks = ((xs - cx).pow(2) + (ys - cy).pow(2) <= r * r).to(torch::kFloat);
  auto images = contrast * masks + 0.3 * torch::randn({n, 1, kTile, kTile}, opts);
  return {images, masks};
}

void set_eval(torch::nn::Module &module) { module.eval(); }
void set_train(torch::nn::Module &module) { module.train(); }

// Mean Dice over the split; the caller decides the model's mode.
template <typename Model> double mean_dice(Model &model, const Tiles &split) {
  torch::NoGradGuard no_grad;
  double dice = 0;
  for (int64_t start = 0; start < split.size(); start += 64) {
    const int64_t n = std::min<int64_t>(64, split.size() - start);
    // BUG(torch-eval-mode-missing): main() reports the untrained baseline
    // before any eval(): BatchNorm normalises each chunk by its own
    // statistics and overwrites the running ones.
    auto pred = (model->forward(split.images.narrow(0, start, n)) > 0).to(torch::kFloat);
    auto truth = split.masks.narrow(0, start, n);
    auto inter = (pred * truth).sum({1, 2, 3});
    auto denom = pred.sum({1, 2, 3}) + truth.sum({1, 2, 3});
    dice += ((2 * inter + 1) / (denom + 1)).sum().template item<double>();
  }
  return dice / static_cast<double>(split.size());
}

torch::Tensor bce_dice_loss(const torch::Tensor &logits, const torch::Tensor &masks) {
  auto bce = torch::binary_cross_entropy_with_logits(logits, masks);
  auto probs = torch::sigmoid(logits);
  auto inter = (probs * masks).sum({1, 2, 3});
  auto denom = probs.sum({1, 2, 3}) + masks.sum({1, 2, 3});
  return bce + (1 - (2 * inter + 1) / (denom + 1)).mean();
}

void train(SegNet &model, const Tiles &train, const Tiles &val, int epochs, int64_t micro_batch, int64_t accum) {
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  auto accumulate = [&](const torch::Tensor &images, const torch::Tensor &masks) {
    // OK(torch-eval-mode-missing): set_train() runs at the top of every epoch.
    auto loss = bce_dice_loss(model->forward(images), masks);
    // BUG(torch-grad-accumulation-unscaled): a mean BCE plus a mean Dice
    // term, accumulated over `accum` micro-batches before each step without
    // being divided by `accum`.
    loss.backward();
    return loss.detach();
  };
  opt.zero_grad();
  int64_t micro = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    set_train(*model);
    auto running = torch::zeros({}, train.images.options());
    for (int64_t start = 0; start + micro_batch <= train.size(); start += micro_batch) {
      running += accumulate(train.images.narrow(0, start, micro_batch), train.masks.narrow(0, start, micro_batch));
      if (++micro == accum) {
        micro = 0;
        // OK(torch-missing-zero-grad): reset right after the step, under its condition.
        opt.step();
        opt.zero_grad();
      }
    }
    set_eval(*model);
    std::cout << "epoch " << epoch << " loss " << (running / (train.size() / micro_batch)).item<double>()
              << " val dice " << mean_dice(model, val) << '\n';
  }
}

// A few passes on the second microscope's tiles, accumulation done right.
void finetune(SegNet &model, const Tiles &tiles, int passes, int64_t accum) {
  set_train(*model);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  opt.zero_grad();
  int64_t micro = 0;
  for (int pass = 0; pass < passes; ++pass) {
    for (int64_t start = 0; start + 16 <= tiles.size(); start += 16) {
      // OK(torch-eval-mode-missing): set_train() above; trains in training mode.
      auto logits = model->forward(tiles.images.narrow(0, start, 16));
      auto loss = bce_dice_loss(logits, tiles.masks.narrow(0, start, 16));
      loss /= static_cast<double>(accum);
      // OK(torch-grad-accumulation-unscaled): divided in place above.
      loss.backward();
      if (++micro == accum) {
        micro = 0;
        // OK(torch-missing-zero-grad): step and reset under one condition.
        opt.step();
        opt.zero_grad();
      }
    }
  }
}

int main() {
  torch::manual_seed(116);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  SegNet model;
  model->to(device);
  auto train_tiles = synth_tiles(1024, 1.0, device), val_tiles = synth_tiles(256, 1.0, device);

  std::cout << "untrained dice " << mean_dice(model, val_tiles) << '\n';
  train(model, train_tiles, val_tiles, 6, 16, 4);

  auto other_train = synth_tiles(128, 0.6, device), other_val = synth_tiles(128, 0.6, device);
  set_eval(*model);
  std::cout << "second microscope before " << mean_dice(model, other_val) << '\n';
  finetune(model, other_train, 3, 4);
  set_eval(*model);
  std::cout << "second microscope after " << mean_dice(model, other_val) << '\n';
}
