// The (2+1)D network: each block factorises a 3-D convolution into a spatial
// 1x3x3 and a temporal 3x1x1 one.
#include "action.h"

namespace {

torch::nn::Sequential conv2plus1d(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Sequential(
      torch::nn::Conv3d(
          torch::nn::Conv3dOptions(in, out, {1, 3, 3}).stride({1, stride, stride}).padding({0, 1, 1}).bias(false)),
      torch::nn::BatchNorm3d(out), torch::nn::ReLU(),
      torch::nn::Conv3d(torch::nn::Conv3dOptions(out, out, {3, 1, 1}).padding({1, 0, 0}).bias(false)),
      torch::nn::BatchNorm3d(out), torch::nn::ReLU());
}

}  // namespace

R2Plus1DImpl::R2Plus1DImpl(int64_t width) {
  stem = register_module("stem", conv2plus1d(3, width, 2));
  block = register_module("block", conv2plus1d(width, 2 * width, 2));
  dropout = register_module("dropout", torch::nn::Dropout(0.5));
  head = register_module("head", torch::nn::Linear(2 * width, kClasses));
}

torch::Tensor R2Plus1DImpl::forward(torch::Tensor clip) {
  auto h = block->forward(stem->forward(clip));
  h = torch::adaptive_avg_pool3d(h, {1, 1, 1}).flatten(1);
  return head->forward(dropout->forward(h));
}

// The checkpoint's head was trained on the corpus' 400 classes and is not in
// the site file: only the backbone is loaded when a path is given.
R2Plus1D build_model(const std::string &checkpoint, torch::Device device) {
  R2Plus1D net;
  if (!checkpoint.empty()) {
    torch::serialize::InputArchive archive;
    archive.load_from(checkpoint);
    torch::serialize::InputArchive stem_archive, block_archive;
    if (archive.try_read("stem", stem_archive))
      net->stem->load(stem_archive);
    if (archive.try_read("block", block_archive))
      net->block->load(block_archive);
  }
  net->to(device);
  return net;
}

void set_backbone_trainable(R2Plus1D &net, bool trainable) {
  for (auto &p : net->stem->parameters())
    p.set_requires_grad(trainable);
  for (auto &p : net->block->parameters())
    p.set_requires_grad(trainable);
}
