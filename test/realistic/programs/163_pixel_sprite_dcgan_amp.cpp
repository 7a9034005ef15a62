// 28x28 RGB pixel-art sprites for a game jam, from the pytorch/examples C++
// DCGAN: the same generator module and Sequential discriminator, the same
// label smoothing and checkpoint cadence. The port runs both updates under
// CUDA autocast through one amp::enable(bool) switch that works with LibTorch
// 1.13 and 2.x, drops the discriminator's Sigmoid for the logits form of the
// BCE (autocast refuses plain binary_cross_entropy), and keeps checkpoints
// and sample sheets in a small Checkpointer class.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

const int64_t kNoiseSize = 100;
const int64_t kBatchSize = 64;
const int64_t kNumberOfEpochs = 30;
const int64_t kCheckpointEvery = 200;
const int64_t kNumberOfSamplesPerCheckpoint = 16;
const double kLossScale = 1024.0;

namespace amp {
inline void enable(bool on) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_enabled(at::kCUDA, on);
#else
  at::autocast::set_enabled(on);
#endif
}
}  // namespace amp

struct DCGANGeneratorImpl : nn::Module {
  explicit DCGANGeneratorImpl(int64_t noise_size)
      : conv1(nn::ConvTranspose2dOptions(noise_size, 256, 4).bias(false)),
        batch_norm1(256),
        conv2(nn::ConvTranspose2dOptions(256, 128, 3).stride(2).padding(1).bias(false)),
        batch_norm2(128),
        conv3(nn::ConvTranspose2dOptions(128, 64, 4).stride(2).padding(1).bias(false)),
        batch_norm3(64),
        conv4(nn::ConvTranspose2dOptions(64, 3, 4).stride(2).padding(1).bias(false)) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv3", conv3);
    register_module("conv4", conv4);
    register_module("batch_norm1", batch_norm1);
    register_module("batch_norm2", batch_norm2);
    register_module("batch_norm3", batch_norm3);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(batch_norm1(conv1(x)));
    x = torch::relu(batch_norm2(conv2(x)));
    x = torch::relu(batch_norm3(conv3(x)));
    return torch::tanh(conv4(x));
  }

  nn::ConvTranspose2d conv1, conv2, conv3, conv4;
  nn::BatchNorm2d batch_norm1, batch_norm2, batch_norm3;
};
TORCH_MODULE(DCGANGenerator);

// Sprites: a coloured blob on a transparent-looking checkerboard, in [-1, 1].
class SpriteSheet : public torch::data::datasets::Dataset<SpriteSheet> {
 public:
  explicit SpriteSheet(int64_t n) : n_(n) {}
  torch::data::Example<> get(size_t) override {
    auto yy = torch::arange(28).view({28, 1}), xx = torch::arange(28).view({1, 28});
    auto checker = ((yy / 4 + xx / 4) % 2).to(torch::kFloat) * 0.2;
    auto centre = torch::randint(8, 20, {2});
    auto blob = ((yy - centre[0]).pow(2) + (xx - centre[1]).pow(2) < 36).to(torch::kFloat);
    auto colour = torch::rand({3, 1, 1});
    auto img = checker.unsqueeze(0) * (1 - blob) + colour * blob;
    return {img * 2 - 1, torch::zeros({1})};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(n_); }

 private:
  int64_t n_;
};

class Checkpointer {
 public:
  Checkpointer(std::string dir, int64_t every) : dir_(std::move(dir)), every_(every) {}
  bool due(int64_t step) const { return step % every_ == 0; }

  void save(DCGANGenerator& generator, nn::Sequential& discriminator) {
    torch::save(generator, dir_ + "/generator-checkpoint.pt");
    torch::save(discriminator, dir_ + "/discriminator-checkpoint.pt");
  }

  void save_samples(DCGANGenerator& generator, torch::Device device) {
    torch::NoGradGuard no_grad;
    generator->eval();
    // OK(torch-eval-mode-missing): eval() for the sample sheet, train() after.
    auto samples = generator->forward(torch::randn({kNumberOfSamplesPerCheckpoint, kNoiseSize, 1, 1}, device));
    generator->train();
    torch::save((samples + 1.0) / 2.0, dir_ + "/sprite-sheet-" + std::to_string(++sheet_) + ".pt");
  }

 private:
  std::string dir_;
  int64_t every_;
  int64_t sheet_ = 0;
};

void unscale(nn::Module& module, double scale) {
  for (auto& p : module.parameters())
    if (p.grad().defined())
      p.grad().div_(scale);
}

// Mean per-pixel standard deviation across a batch of samples: a cheap
// mode-collapse alarm for the jam's art lead.
double sample_diversity(DCGANGenerator& generator, torch::Device device, int rounds) {
  torch::NoGradGuard no_grad;
  double total = 0;
  for (int r = 0; r < rounds; ++r) {
    // BUG(torch-eval-mode-missing): the generator comes straight from the
    // training loop; batch norm normalises each diversity batch by itself.
    auto sprites = generator->forward(torch::randn({64, kNoiseSize, 1, 1}, device));
    total += sprites.flatten(1).std(0).mean().item<double>();
  }
  return total / rounds;
}

int main() {
  torch::manual_seed(163);
  torch::Device device(torch::kCPU);
  if (torch::cuda::is_available()) {
    std::cout << "CUDA is available! Training on GPU." << std::endl;
    device = torch::Device(torch::kCUDA);
  }

  DCGANGenerator generator(kNoiseSize);
  generator->to(device);

  nn::Sequential discriminator(
      nn::Conv2d(nn::Conv2dOptions(3, 64, 4).stride(2).padding(1).bias(false)),
      nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
      nn::Conv2d(nn::Conv2dOptions(64, 128, 4).stride(2).padding(1).bias(false)),
      nn::BatchNorm2d(128),
      nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
      nn::Conv2d(nn::Conv2dOptions(128, 256, 4).stride(2).padding(1).bias(false)),
      nn::BatchNorm2d(256),
      nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)),
      nn::Conv2d(nn::Conv2dOptions(256, 1, 3).stride(1).padding(0).bias(false)));
  discriminator->to(device);

  auto dataset = SpriteSheet(12800).map(torch::data::transforms::Stack<>());
  const int64_t batches_per_epoch = (dataset.size().value() + kBatchSize - 1) / kBatchSize;
  auto data_loader =
      torch::data::make_data_loader(std::move(dataset), torch::data::DataLoaderOptions().batch_size(kBatchSize).workers(2));

  torch::optim::Adam generator_optimizer(generator->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  torch::optim::Adam discriminator_optimizer(discriminator->parameters(),
                                             torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}));
  Checkpointer checkpointer("sprites", kCheckpointEvery);

  int64_t step = 0;
  for (int64_t epoch = 1; epoch <= kNumberOfEpochs; ++epoch) {
    int64_t batch_index = 0;
    for (torch::data::Example<>& batch : *data_loader) {
      // Train discriminator with real and fake sprites.
      discriminator->zero_grad();
      torch::Tensor real_images = batch.data.to(device);
      torch::Tensor real_labels = torch::empty(batch.data.size(0), device).uniform_(0.8, 1.0);
      torch::Tensor noise = torch::randn({batch.data.size(0), kNoiseSize, 1, 1}, device);
      torch::Tensor fake_labels = torch::zeros(batch.data.size(0), device);
      amp::enable(true);
      torch::Tensor real_output = discriminator->forward(real_images).reshape(real_labels.sizes());
      torch::Tensor fake_images = generator->forward(noise);
      torch::Tensor fake_output = discriminator->forward(fake_images.detach()).reshape(fake_labels.sizes());
      torch::Tensor d_loss = F::binary_cross_entropy_with_logits(real_output, real_labels) +
                             F::binary_cross_entropy_with_logits(fake_output, fake_labels);
      amp::enable(false);
      // OK(torch-autocast-region): the region is closed and the loss scaled.
      (d_loss * kLossScale).backward();
      unscale(*discriminator, kLossScale);
      // OK(torch-missing-zero-grad): discriminator->zero_grad() at the top.
      discriminator_optimizer.step();

      // Train generator.
      generator->zero_grad();
      fake_labels.fill_(1);
      amp::enable(true);
      fake_output = discriminator->forward(fake_images).reshape(fake_labels.sizes());
      torch::Tensor g_loss = F::binary_cross_entropy_with_logits(fake_output, fake_labels);
      amp::enable(false);
      // BUG(torch-autocast-region): the generator's float16 loss reaches
      // backward() without the scale the discriminator's loss gets.
      g_loss.backward();
      generator_optimizer.step();
      ++batch_index;

      if (++step % kCheckpointEvery == 0) {
        std::printf("\r[%2ld/%2ld][%3ld/%3ld] D_loss: %.4f | G_loss: %.4f\n", static_cast<long>(epoch),
                    static_cast<long>(kNumberOfEpochs), static_cast<long>(batch_index),
                    static_cast<long>(batches_per_epoch), d_loss.item<float>(), g_loss.item<float>());
      }
      if (checkpointer.due(step)) {
        checkpointer.save(generator, discriminator);
        checkpointer.save_samples(generator, device);
      }
    }
  }
  std::cout << "sample diversity " << sample_diversity(generator, device, 8) << std::endl;
}
