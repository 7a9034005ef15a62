// Fine-tuning a small residual network with a frozen stem and an exponential
// moving average (EMA) copy of the weights made with clone().
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <vector>

struct FinetuneConfig {
  int64_t classes = 10;
  int64_t batch = 32;
  int64_t steps = 400;
  double lr = 1e-3;
  double ema_decay = 0.999;
};

struct ResNetImpl : torch::nn::Cloneable<ResNetImpl> {
  explicit ResNetImpl(int64_t classes) : classes_(classes) { reset(); }

  void reset() override {
    stem = register_module("stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)));
    bn = register_module("bn", torch::nn::BatchNorm2d(32));
    block = register_module("block", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 32, 3).padding(1)));
    fc = register_module("fc", torch::nn::Linear(32, classes_));
  }

  torch::Tensor forward(torch::Tensor x) {
    auto h = torch::relu(bn(stem(x)));
    h = h + torch::relu(block(h));
    return fc(torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  }

  int64_t classes_;
  torch::nn::Conv2d stem{nullptr}, block{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

void freeze_stem(ResNet &model) {
  for (auto &p : model->stem->parameters())
    p.requires_grad_(false);
}

void ema_update(ResNetImpl &ema, ResNetImpl &model, double decay) {
  torch::NoGradGuard no_grad;
  auto dst = ema.parameters();
  auto src = model.parameters();
  for (size_t i = 0; i < dst.size(); ++i)
    dst[i].mul_(decay).add_(src[i], 1.0 - decay);
}

int main() {
  FinetuneConfig cfg;
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  ResNet model(cfg.classes);
  model->to(device);
  freeze_stem(model);
  // clone() copies the parameters where they are: on 'device'.
  auto ema = std::dynamic_pointer_cast<ResNetImpl>(model->clone());

  std::vector<torch::Tensor> trainable;
  for (auto &p : model->parameters())
    if (p.requires_grad())
      trainable.push_back(p);
  torch::optim::SGD opt(trainable, torch::optim::SGDOptions(cfg.lr).momentum(0.9));

  auto count_correct = [](const torch::Tensor &logits, const torch::Tensor &labels) {
    // BUG(torch-host-sync-in-loop): called on every training step below;
    // the logits live on 'device'.
    return logits.argmax(1).eq(labels).sum().item<int64_t>();
  };

  model->train();
  int64_t correct = 0, seen = 0;
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto images = torch::randn({cfg.batch, 3, 32, 32}, device);
    auto labels = torch::randint(0, cfg.classes, {cfg.batch}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto logits = model->forward(images);
    auto loss = torch::nn::functional::cross_entropy(logits, labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    ema_update(*ema, *model, cfg.ema_decay);
    correct += count_correct(logits, labels);
    seen += cfg.batch;
  }
  std::cout << "train accuracy " << static_cast<double>(correct) / seen << '\n';

  ema->eval();
  {
    torch::NoGradGuard no_grad;
    auto probe = torch::randn({4, 3, 32, 32});
    // BUG(torch-device-mismatch): the EMA copy was cloned from a model on
    // 'device'; the probe batch is a CPU factory result.
    auto probe_logits = ema->forward(probe);
    std::cout << "probe logits " << probe_logits.sizes() << '\n';
    // OK(torch-device-mismatch): the probe is moved first.
    auto moved_logits = ema->forward(probe.to(device));
    std::cout << "moved probe logits " << moved_logits.sizes() << '\n';
  }
  return 0;
}
