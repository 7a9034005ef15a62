// The leaf network, its factory, the EMA of its weights and the
// deployment switch.
#include "leaf.h"

namespace {

void add_conv_bn(torch::nn::Sequential &seq, int64_t in, int64_t out, int64_t stride) {
  seq->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
  seq->push_back(torch::nn::BatchNorm2d(out));
  seq->push_back(torch::nn::ReLU());
}

}  // namespace

LeafNetImpl::LeafNetImpl(int64_t width, double dropout) {
  torch::nn::Sequential s, b;
  add_conv_bn(s, 3, width, 2);
  add_conv_bn(b, width, 2 * width, 2);
  add_conv_bn(b, 2 * width, 4 * width, 2);
  add_conv_bn(b, 4 * width, 4 * width, 1);
  stem = register_module("stem", s);
  body = register_module("body", b);
  drop = register_module("drop", torch::nn::Dropout(dropout));
  head = register_module("head", torch::nn::Linear(4 * width, kClasses));
}

torch::Tensor LeafNetImpl::forward(torch::Tensor x) {
  x = body->forward(stem->forward(x));
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return head->forward(drop->forward(x));
}

// A fresh network with He-initialised convolutions, on the device.
LeafNet make_leafnet(const TrainConfig &cfg, torch::Device device) {
  LeafNet net(cfg.width, cfg.dropout);
  for (auto &m : net->modules(/*include_self=*/false)) {
    if (auto *conv = m->as<torch::nn::Conv2d>())
      torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
  }
  net->to(device);
  return net;
}

// ema <- decay * ema + (1 - decay) * net; the batch-norm statistics are
// copied as they are. decay 0 makes ema a copy of net.
void ema_update(LeafNet &ema, const LeafNet &net, double decay) {
  torch::NoGradGuard no_grad;
  auto dst = ema->parameters();
  const auto src = net->parameters();
  for (size_t i = 0; i < dst.size(); ++i) {
    // OK(torch-loss-accumulation-graph, torch-device-mismatch): parameters
    // under a no-grad guard, and both networks come from make_leafnet() on
    // the same device.
    dst[i].mul_(decay).add_(src[i], 1.0 - decay);
  }
  auto dst_buf = ema->buffers();
  const auto src_buf = net->buffers();
  for (size_t i = 0; i < dst_buf.size(); ++i)
    dst_buf[i].copy_(src_buf[i]);
}

// The live network as the app would run it: inference mode, frozen.
void freeze(LeafNet &net) {
  net->eval();
  for (auto &p : net->parameters())
    p.set_requires_grad(false);
}
