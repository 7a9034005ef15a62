// bench corpus: a small CNN trained with Adam, evaluated under NoGradGuard.
#include <torch/torch.h>

#include <iostream>

struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(32))),
        fc(register_module("fc", torch::nn::Linear(32 * 7 * 7, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(bn(conv2(x))), 2);
    return fc(x.flatten(1));
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
};
TORCH_MODULE(ConvNet);

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  ConvNet net;
  net->to(device);
  torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(1e-3));
  auto images = torch::randn({512, 1, 28, 28});
  auto labels = torch::randint(0, 10, {512}, torch::kLong);

  for (int epoch = 0; epoch < 5; ++epoch) {
    net->train();
    auto total = torch::zeros({}, device);
    for (int64_t i = 0; i < images.size(0); i += 64) {
      auto x = images.slice(0, i, i + 64).to(device);
      auto y = labels.slice(0, i, i + 64).to(device);
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
      loss.backward();
      optimizer.step();
      total += loss.detach();
    }
    std::cout << "epoch " << epoch << " loss " << total.item<double>() << '\n';
  }

  net->eval();
  torch::NoGradGuard no_grad;
  int64_t correct = 0;
  for (int64_t i = 0; i < images.size(0); i += 128) {
    auto x = images.slice(0, i, i + 128).to(device);
    auto y = labels.slice(0, i, i + 128).to(device);
    correct += net->forward(x).argmax(1).eq(y).sum().item<int64_t>();
  }
  std::cout << "accuracy " << static_cast<double>(correct) / images.size(0) << '\n';
}
