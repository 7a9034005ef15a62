// DCGAN for 64x64 tileable terrain heightmaps (erosion-simulated patches used
// as a procedural-generation prior in a game engine). Follows the
// pytorch/examples C++ DCGAN: generator and discriminator are Sequentials,
// here built layer by layer at run time from a namespace-scope options
// struct that also holds the device; a checkpointer saves both nets, and a
// sample writer dumps PGM previews of a fixed noise batch.
#include <torch/torch.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>

namespace {

struct Options {
  int64_t noise = 100;
  int64_t base_channels = 64;
  int64_t resolution = 64;
  int64_t batch_size = 64;
  int64_t epochs = 30;
  int64_t log_interval = 50;
  int64_t checkpoint_every = 400;
  torch::Device device{torch::kCPU};
};

Options g_opts;

// Erosion-simulated patches stand in for the baked terrain set.
class HeightmapDataset : public torch::data::datasets::Dataset<HeightmapDataset> {
 public:
  explicit HeightmapDataset(int64_t n) {
    auto ridges = torch::randn({n, 1, 8, 8});
    auto up = torch::nn::functional::interpolate(
        ridges, torch::nn::functional::InterpolateFuncOptions()
                    .size(std::vector<int64_t>{g_opts.resolution, g_opts.resolution})
                    .mode(torch::kBicubic)
                    .align_corners(false));
    maps_ = torch::tanh(up + 0.1 * torch::randn_like(up));
  }
  torch::data::Example<> get(size_t i) override {
    return {maps_[static_cast<int64_t>(i)], torch::zeros({1})};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(maps_.size(0)); }

 private:
  torch::Tensor maps_;
};

torch::nn::Sequential make_generator() {
  torch::nn::Sequential net;
  int64_t in = g_opts.noise;
  int64_t out = g_opts.base_channels * 8;
  net->push_back(torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(in, out, 4).bias(false)));
  net->push_back(torch::nn::BatchNorm2d(out));
  net->push_back(torch::nn::ReLU(true));
  for (int64_t size = 4; size < g_opts.resolution / 2; size *= 2) {
    in = out;
    out /= 2;
    net->push_back(
        torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(in, out, 4).stride(2).padding(1).bias(false)));
    net->push_back(torch::nn::BatchNorm2d(out));
    net->push_back(torch::nn::ReLU(true));
  }
  net->push_back(torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(out, 1, 4).stride(2).padding(1).bias(false)));
  net->push_back(torch::nn::Tanh());
  return net;
}

torch::nn::Sequential make_discriminator() {
  torch::nn::Sequential net;
  int64_t in = 1;
  int64_t out = g_opts.base_channels;
  for (int64_t size = g_opts.resolution; size > 4; size /= 2) {
    net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 4).stride(2).padding(1).bias(false)));
    if (in != 1)
      net->push_back(torch::nn::BatchNorm2d(out));
    net->push_back(torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)));
    in = out;
    out *= 2;
  }
  net->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, 1, 4).bias(false)));
  net->push_back(torch::nn::Sigmoid());
  return net;
}

void write_pgm(const torch::Tensor &image, const std::string &path) {
  auto bytes = (image.squeeze() * 255.0).clamp(0, 255).to(torch::kUInt8).contiguous();
  std::ofstream out(path, std::ios::binary);
  out << "P5\n" << bytes.size(1) << " " << bytes.size(0) << "\n255\n";
  out.write(reinterpret_cast<const char *>(bytes.data_ptr<uint8_t>()), bytes.numel());
}

class SampleWriter {
 public:
  explicit SampleWriter(torch::Device device)
      : fixed_noise_(torch::randn({4, g_opts.noise, 1, 1}, torch::TensorOptions().device(device))) {}

  void write(torch::nn::Sequential &generator, int64_t checkpoint) {
    torch::NoGradGuard no_grad;
    generator->eval();
    auto images = generator->forward(fixed_noise_);
    generator->train();
    auto host = ((images + 1.0) / 2.0).to(torch::kCPU, /*non_blocking=*/true);
    for (int64_t i = 0; i < host.size(0); ++i) {
      // BUG(torch-non-blocking-d2h-race): the copy to the host was not waited
      // for; write_pgm reads bytes the GPU may not have written yet.
      write_pgm(host[i], "terrain-" + std::to_string(checkpoint) + "-" + std::to_string(i) + ".pgm");
    }
  }

 private:
  torch::Tensor fixed_noise_;
};

}  // namespace

int main(int argc, char **argv) {
  torch::manual_seed(7);

  // Named machine profiles from the studio's render farm.
  static const std::map<std::string, std::string> kProfiles = {
      {"laptop", "cpu"},
      {"workstation", "cuda"},
      // BUG(torch-device-index-unchecked): render nodes export one GPU with
      // CUDA_VISIBLE_DEVICES; "cuda:1" does not exist there and is never
      // compared with torch::cuda::device_count().
      {"render-node", "cuda:1"},
  };
  const std::string profile = argc > 1 ? argv[1] : "workstation";
  if (torch::cuda::is_available())
    g_opts.device = torch::Device(kProfiles.at(profile));

  auto generator = make_generator();
  auto discriminator = make_discriminator();
  generator->to(g_opts.device);
  discriminator->to(g_opts.device);

  auto data_loader = torch::data::make_data_loader(
      HeightmapDataset(20000).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(g_opts.batch_size).workers(2));

  torch::optim::Adam generator_optimizer(generator->parameters(), torch::optim::AdamOptions(2e-4).betas({0.5, 0.5}));
  torch::optim::Adam discriminator_optimizer(discriminator->parameters(),
                                             torch::optim::AdamOptions(5e-4).betas({0.5, 0.5}));

  SampleWriter samples(g_opts.device);
  int64_t checkpoint_counter = 1;
  for (int64_t epoch = 1; epoch <= g_opts.epochs; ++epoch) {
    int64_t batch_index = 0;
    for (torch::data::Example<> &batch : *data_loader) {
      // Train discriminator with real images.
      discriminator->zero_grad();
      torch::Tensor real_images = batch.data.to(g_opts.device);
      torch::Tensor real_labels = torch::empty(batch.data.size(0), g_opts.device).uniform_(0.8, 1.0);
      torch::Tensor real_output = discriminator->forward(real_images).reshape(real_labels.sizes());
      // OK(torch-device-mismatch): the smoothed labels are created on the device.
      torch::Tensor d_loss_real = torch::binary_cross_entropy(real_output, real_labels);
      d_loss_real.backward();

      // Train discriminator with fake images.
      torch::Tensor noise = torch::randn({batch.data.size(0), g_opts.noise, 1, 1}, g_opts.device);
      torch::Tensor fake_images = generator->forward(noise);
      torch::Tensor fake_labels = torch::zeros(batch.data.size(0));
      torch::Tensor fake_output = discriminator->forward(fake_images.detach()).reshape(fake_labels.sizes());
      // BUG(torch-device-mismatch): fake_labels was created without the
      // device; the discriminator's output is on g_opts.device.
      torch::Tensor d_loss_fake = torch::binary_cross_entropy(fake_output, fake_labels);
      d_loss_fake.backward();

      torch::Tensor d_loss = d_loss_real + d_loss_fake;
      discriminator_optimizer.step();

      // Train generator.
      generator->zero_grad();
      torch::Tensor target_labels = torch::ones(batch.data.size(0), g_opts.device);
      fake_output = discriminator->forward(fake_images).reshape(target_labels.sizes());
      torch::Tensor g_loss = torch::binary_cross_entropy(fake_output, target_labels);
      g_loss.backward();
      generator_optimizer.step();

      if (++batch_index % g_opts.log_interval == 0) {
        // OK(torch-host-sync-in-loop): logging steps only.
        std::printf("[%2ld/%2ld][%4ld] D_loss: %.4f | G_loss: %.4f\n", static_cast<long>(epoch),
                    static_cast<long>(g_opts.epochs), static_cast<long>(batch_index), d_loss.item<float>(),
                    g_loss.item<float>());
      }
      if (batch_index % g_opts.checkpoint_every == 0) {
        torch::save(generator, "terrain-generator.pt");
        torch::save(discriminator, "terrain-discriminator.pt");
        samples.write(generator, checkpoint_counter++);
      }
    }
  }
  std::cout << "Training complete." << std::endl;
  return 0;
}
