// Kuzushiji-MNIST (cursive kana) classifier, ported from the pytorch/examples
// C++ MNIST sample: the same Net (a module object, not a holder) with a
// functional dropout gated on is_training(), the same train()/test()
// templates over the data loader type. The port adds a pseudo-labelling round
// over an unlabelled pool, a fine-tune on the pseudo-labelled tiles with
// gradient accumulation, and temperature scaling on the test split. The tiles
// come from a custom torch::data::Dataset (synthesised here).
#include <torch/torch.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <utility>
#include <vector>

const int64_t kTrainBatchSize = 64;
const int64_t kTestBatchSize = 1000;
const int64_t kNumberOfEpochs = 6;
const int64_t kPseudoLabelFrom = 4;
const int64_t kLogInterval = 10;

struct Net : torch::nn::Module {
  Net() : conv1(torch::nn::Conv2dOptions(1, 10, /*kernel_size=*/5)),
          conv2(torch::nn::Conv2dOptions(10, 20, /*kernel_size=*/5)),
          fc1(320, 50),
          fc2(50, 10) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("conv2_drop", conv2_drop);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = x.view({-1, 320});
    x = torch::relu(fc1->forward(x));
    x = torch::dropout(x, /*p=*/0.5, /*train=*/is_training());
    x = fc2->forward(x);
    return torch::log_softmax(x, /*dim=*/1);
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};

// 28x28 kana tiles: class c draws a stroke at a class-dependent slant.
class KanaTiles : public torch::data::datasets::Dataset<KanaTiles> {
 public:
  KanaTiles(torch::Tensor images, torch::Tensor targets) : images_(std::move(images)), targets_(std::move(targets)) {}

  static KanaTiles synthesise(int64_t n) {
    auto targets = torch::randint(10, {n}, torch::kLong);
    auto grid = torch::linspace(-1, 1, 28);
    auto rows = grid.view({1, 28, 1}), cols = grid.view({1, 1, 28});
    auto slant = (targets.to(torch::kFloat) / 5.0 - 1.0).view({n, 1, 1});
    auto stroke = torch::exp(-(cols - slant * rows).pow(2) * 20.0);
    return KanaTiles((stroke + 0.2 * torch::rand({n, 28, 28})).unsqueeze(1), targets);
  }

  torch::data::Example<> get(size_t index) override { return {images_[index], targets_[index]}; }
  torch::optional<size_t> size() const override { return images_.size(0); }

 private:
  torch::Tensor images_, targets_;
};

template <typename DataLoader>
void train(size_t epoch, Net& model, torch::Device device, DataLoader& data_loader,
           torch::optim::Optimizer& optimizer, size_t dataset_size) {
  model.train();
  size_t batch_idx = 0;
  for (auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    optimizer.zero_grad();
    auto output = model.forward(data);
    auto loss = torch::nll_loss(output, targets);
    // BUG(torch-host-sync-in-loop): the example's NaN assert reads the loss
    // back to the host on every batch.
    AT_ASSERT(!std::isnan(loss.template item<float>()));
    loss.backward();
    optimizer.step();

    if (batch_idx++ % kLogInterval == 0) {
      // OK(torch-host-sync-in-loop): every kLogInterval batches only.
      std::printf("\rTrain Epoch: %zu [%5ld/%5zu] Loss: %.4f", epoch,
                  static_cast<long>(batch_idx * batch.data.size(0)), dataset_size, loss.template item<float>());
    }
  }
}

template <typename DataLoader>
void test(Net& model, torch::Device device, DataLoader& data_loader, size_t dataset_size) {
  torch::NoGradGuard no_grad;
  model.eval();
  double test_loss = 0;
  int64_t correct = 0;
  for (const auto& batch : data_loader) {
    auto data = batch.data.to(device), targets = batch.target.to(device);
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval()
    // and the guard are right above.
    auto output = model.forward(data);
    test_loss += torch::nll_loss(output, targets, /*weight=*/{}, torch::Reduction::Sum).template item<float>();
    auto pred = output.argmax(1);
    correct += pred.eq(targets).sum().template item<int64_t>();
  }
  test_loss /= dataset_size;
  std::printf("\nTest set: Average loss: %.4f | Accuracy: %.3f\n", test_loss,
              static_cast<double>(correct) / dataset_size);
}

// Keeps the pool tiles whose predicted class has probability > threshold.
template <typename DataLoader>
std::pair<torch::Tensor, torch::Tensor> pseudo_label(Net& model, torch::Device device, DataLoader& pool,
                                                     double threshold) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> xs, ys;
  for (auto& batch : pool) {
    // BUG(torch-eval-mode-missing): called between train() and test() in the
    // epoch loop, so both dropouts are still on while labelling the pool.
    auto probs = model.forward(batch.data.to(device)).exp();
    auto [confidence, label] = probs.max(1);
    auto keep = (confidence > threshold).cpu();
    xs.push_back(batch.data.index({keep}));
    ys.push_back(label.cpu().index({keep}));
  }
  return {torch::cat(xs), torch::cat(ys)};
}

template <typename DataLoader>
void finetune(Net& model, torch::Device device, DataLoader& data_loader, torch::optim::Optimizer& optimizer,
              int64_t accum_steps) {
  model.train();
  optimizer.zero_grad();
  int64_t micro = 0;
  for (auto it = data_loader.begin(); it != data_loader.end(); ++it) {
    auto data = it->data.to(device), targets = it->target.to(device);
    auto loss = torch::nll_loss(model.forward(data), targets);
    // BUG(torch-grad-accumulation-unscaled): accum_steps batch means add up
    // in the gradients before each step; the loss is never divided.
    loss.backward();
    if (++micro % accum_steps == 0) {
      optimizer.step();
      optimizer.zero_grad();
    }
  }
}

// Temperature scaling on held-out logits (Guo et al. 2017).
template <typename DataLoader>
double fit_temperature(Net& model, torch::Device device, DataLoader& data_loader) {
  model.eval();
  std::vector<torch::Tensor> logits, labels;
  {
    torch::NoGradGuard no_grad;
    for (auto& batch : data_loader) {
      // OK(torch-eval-mode-missing): eval() at the top of the function.
      logits.push_back(model.forward(batch.data.to(device)));
      labels.push_back(batch.target.to(device));
    }
  }
  auto all_logits = torch::cat(logits), all_labels = torch::cat(labels);
  auto log_t = torch::zeros({1}, torch::TensorOptions().device(device).requires_grad(true));
  torch::optim::Adam opt({log_t}, torch::optim::AdamOptions(0.01));
  opt.zero_grad();
  for (int it = 0; it < 200; ++it) {
    auto nll = torch::nll_loss(torch::log_softmax(all_logits / log_t.exp(), 1), all_labels);
    nll.backward();
    // BUG(torch-missing-zero-grad): the only zero_grad() is before the loop;
    // every step applies the sum of all earlier gradients of log_t.
    opt.step();
  }
  return log_t.exp().item<double>();
}

int main() {
  torch::manual_seed(161);
  torch::DeviceType device_type;
  if (torch::cuda::is_available()) {
    std::cout << "CUDA available! Training on GPU." << std::endl;
    device_type = torch::kCUDA;
  } else {
    std::cout << "Training on CPU." << std::endl;
    device_type = torch::kCPU;
  }
  torch::Device device(device_type);

  Net model;
  model.to(device);

  auto train_dataset = KanaTiles::synthesise(6000).map(torch::data::transforms::Normalize<>(0.19, 0.35))
                           .map(torch::data::transforms::Stack<>());
  const size_t train_size = train_dataset.size().value();
  auto train_loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
      std::move(train_dataset), kTrainBatchSize);
  auto test_dataset = KanaTiles::synthesise(1000).map(torch::data::transforms::Normalize<>(0.19, 0.35))
                          .map(torch::data::transforms::Stack<>());
  const size_t test_size = test_dataset.size().value();
  auto test_loader = torch::data::make_data_loader(std::move(test_dataset), kTestBatchSize);
  auto pool_loader = torch::data::make_data_loader(
      KanaTiles::synthesise(4000).map(torch::data::transforms::Normalize<>(0.19, 0.35))
          .map(torch::data::transforms::Stack<>()),
      kTestBatchSize);

  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.5));

  std::vector<torch::Tensor> pseudo_x, pseudo_y;
  for (size_t epoch = 1; epoch <= kNumberOfEpochs; ++epoch) {
    train(epoch, model, device, *train_loader, optimizer, train_size);
    if (epoch >= kPseudoLabelFrom) {
      auto [x, y] = pseudo_label(model, device, *pool_loader, 0.95);
      pseudo_x.push_back(x);
      pseudo_y.push_back(y);
    }
    test(model, device, *test_loader, test_size);
  }

  auto pseudo_loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      KanaTiles(torch::cat(pseudo_x), torch::cat(pseudo_y)).map(torch::data::transforms::Stack<>()),
      /*batch_size=*/16);
  finetune(model, device, *pseudo_loader, optimizer, /*accum_steps=*/4);
  test(model, device, *test_loader, test_size);
  std::cout << "temperature " << fit_temperature(model, device, *test_loader) << std::endl;
}
