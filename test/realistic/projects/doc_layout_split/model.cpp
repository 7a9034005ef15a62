// The network: two dilated conv/batch-norm blocks keep the full raster, a
// 1x1 convolution classifies each pixel.
#include "layout.h"

#include <iostream>

LayoutNetImpl::LayoutNetImpl(int64_t width) {
  encoder = register_module(
      "encoder",
      torch::nn::Sequential(
          torch::nn::Conv2d(torch::nn::Conv2dOptions(1, width, 3).padding(1).bias(false)),
          torch::nn::BatchNorm2d(width), torch::nn::ReLU(),
          torch::nn::Conv2d(torch::nn::Conv2dOptions(width, width, 3).padding(2).dilation(2).bias(false)),
          torch::nn::BatchNorm2d(width), torch::nn::ReLU(),
          torch::nn::Conv2d(torch::nn::Conv2dOptions(width, width, 3).padding(4).dilation(4).bias(false)),
          torch::nn::BatchNorm2d(width), torch::nn::ReLU()));
  drop = register_module("drop", torch::nn::Dropout(0.2));
  classifier = register_module("classifier", torch::nn::Conv2d(torch::nn::Conv2dOptions(width, kRegions, 1)));
}

torch::Tensor LayoutNetImpl::forward(torch::Tensor pages) {
  return classifier->forward(drop->forward(encoder->forward(pages)));
}

// The checkpoint, when given, was trained on born-digital PDFs rendered at
// the same resolution.
LayoutNet build_layout_net(int64_t width, const std::string &checkpoint) {
  LayoutNet net(width);
  if (!checkpoint.empty())
    torch::load(net, checkpoint);
  return net;
}

// Shared by every model of the digitisation line (this one, the OCR
// recogniser, the table structure parser): moves it and reports its size.
void place_module(torch::nn::Module &module, torch::Device device, const std::string &name) {
  module.to(device);
  int64_t count = 0;
  for (const auto &p : module.parameters())
    count += p.numel();
  std::cout << name << ": " << count << " parameters on " << device << '\n';
}
