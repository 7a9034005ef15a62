// bench corpus: a custom dataset, transforms, and a data loader feeding a
// regression model with pinned, non-blocking copies.
#include <torch/torch.h>

#include <iostream>
#include <vector>

class Regression : public torch::data::datasets::Dataset<Regression> {
 public:
  explicit Regression(int64_t n) : x_(torch::randn({n, 16})), y_(x_.sum(1, true)) {}
  torch::data::Example<> get(size_t i) override { return {x_[i], y_[i]}; }
  torch::optional<size_t> size() const override { return x_.size(0); }

 private:
  torch::Tensor x_, y_;
};

torch::nn::Sequential make_model() {
  return torch::nn::Sequential(torch::nn::Linear(16, 64), torch::nn::ReLU(),
                               torch::nn::Dropout(0.1), torch::nn::Linear(64, 1));
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  auto model = make_model();
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(0.01).momentum(0.9));
  auto loader = torch::data::make_data_loader(
      Regression(4096).map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions().batch_size(128).workers(2));

  std::vector<double> history;
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto sum = torch::zeros({}, device);
    int64_t steps = 0;
    for (auto &batch : *loader) {
      auto x = batch.data.pin_memory().to(device, /*non_blocking=*/true);
      auto y = batch.target.to(device);
      optimizer.zero_grad();
      auto loss = torch::mse_loss(model->forward(x), y);
      loss.backward();
      optimizer.step();
      sum += loss.detach();
      ++steps;
    }
    history.push_back(sum.item<double>() / static_cast<double>(steps));
  }
  for (double h : history)
    std::cout << h << '\n';
}
