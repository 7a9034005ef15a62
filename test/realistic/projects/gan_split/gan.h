// A plain non-saturating GAN on 2-D points, split over files: models.cpp holds
// the networks and their losses, utils.cpp the data and housekeeping,
// train.cpp the loop, main.cpp the set-up.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

constexpr int64_t kNoise = 32;
constexpr int64_t kData = 2;

struct GenImpl : torch::nn::Module {
  GenImpl();
  torch::Tensor forward(torch::Tensor z);
  torch::nn::Sequential net{nullptr};
};
TORCH_MODULE(Gen);

struct DiscImpl : torch::nn::Module {
  DiscImpl();
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Sequential net{nullptr};
};
TORCH_MODULE(Disc);

struct GanStats {
  torch::Tensor d_total;
  torch::Tensor g_total;
  int64_t steps = 0;
};

// models.cpp
torch::Tensor discriminator_loss(Disc &disc, const torch::Tensor &real, const torch::Tensor &fake);
torch::Tensor generator_loss(Disc &disc, const torch::Tensor &fake);

// utils.cpp
torch::Tensor sample_real(int64_t n);
void end_of_epoch();
torch::Device sampling_device();

// train.cpp
GanStats train_gan(Gen &gen, Disc &disc, torch::Device device, int64_t epochs, int64_t steps);
