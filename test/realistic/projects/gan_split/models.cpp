#include "gan.h"

GenImpl::GenImpl() {
  net = register_module("net", torch::nn::Sequential(torch::nn::Linear(kNoise, 128), torch::nn::ReLU(),
                                                     torch::nn::Linear(128, kData)));
}
torch::Tensor GenImpl::forward(torch::Tensor z) { return net->forward(z); }

DiscImpl::DiscImpl() {
  net = register_module("net", torch::nn::Sequential(torch::nn::Linear(kData, 128), torch::nn::LeakyReLU(),
                                                     torch::nn::Linear(128, 1)));
}
torch::Tensor DiscImpl::forward(torch::Tensor x) { return net->forward(x); }

torch::Tensor discriminator_loss(Disc &disc, const torch::Tensor &real, const torch::Tensor &fake) {
  auto real_logits = disc->forward(real);
  auto fake_logits = disc->forward(fake);
  return torch::binary_cross_entropy_with_logits(real_logits, torch::ones_like(real_logits)) +
         torch::binary_cross_entropy_with_logits(fake_logits, torch::zeros_like(fake_logits));
}

torch::Tensor generator_loss(Disc &disc, const torch::Tensor &fake) {
  auto logits = disc->forward(fake);
  return torch::binary_cross_entropy_with_logits(logits, torch::ones_like(logits));
}
