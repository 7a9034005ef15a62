// Point-cloud classification with a PointNet-style network (shared per-point
// MLP, max pool, classifier). Augmentation uses a bank of per-axis rotation
// matrices kept in a std::array; evaluation and memory housekeeping are
// function objects handed to the training driver.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

struct PointNetImpl : torch::nn::Module {
  explicit PointNetImpl(int64_t classes)
      : point_mlp(register_module("point_mlp", torch::nn::Sequential(torch::nn::Linear(3, 64), torch::nn::ReLU(),
                                                                     torch::nn::Linear(64, 256), torch::nn::ReLU()))),
        head(register_module("head", torch::nn::Linear(256, classes))) {}
  // x: [batch, points, 3]
  torch::Tensor forward(torch::Tensor x) {
    auto per_point = point_mlp->forward(x);
    return head(std::get<0>(per_point.max(1)));
  }
  torch::nn::Sequential point_mlp;
  torch::nn::Linear head;
};
TORCH_MODULE(PointNet);

// Rotations about x, y and z by a fixed angle.
struct RotationBank {
  std::array<torch::Tensor, 3> rot;
  explicit RotationBank(double angle) {
    const double c = std::cos(angle), s = std::sin(angle);
    rot[0] = torch::tensor({1.0, 0.0, 0.0, 0.0, c, -s, 0.0, s, c}, torch::kFloat).view({3, 3});
    rot[1] = torch::tensor({c, 0.0, s, 0.0, 1.0, 0.0, -s, 0.0, c}, torch::kFloat).view({3, 3});
    rot[2] = torch::tensor({c, -s, 0.0, s, c, 0.0, 0.0, 0.0, 1.0}, torch::kFloat).view({3, 3});
  }
  void to(torch::Device device) {
    for (auto &r : rot)
      r = r.to(device);
  }
};

// Accuracy over a list of single clouds, one forward each.
struct CloudAccuracy {
  PointNet net;
  torch::Device device;
  double operator()(const std::vector<torch::Tensor> &clouds, const std::vector<int64_t> &labels) {
    int64_t correct = 0;
    for (size_t i = 0; i < clouds.size(); ++i) {
      // BUG(torch-inference-without-no-grad): an evaluation loop with no
      // NoGradGuard; every forward records a graph nobody differentiates.
      auto logits = net->forward(clouds[i].to(device).unsqueeze(0));
      correct += logits.argmax(1).item<int64_t>() == labels[i];
    }
    return static_cast<double>(correct) / static_cast<double>(clouds.size());
  }
};

// Confusion matrix over batches, copied back to the host for the report.
struct Confusion {
  PointNet net;
  torch::Device device;
  int64_t classes;
  torch::Tensor operator()(const torch::Tensor &points, const torch::Tensor &labels) {
    torch::NoGradGuard no_grad;
    auto matrix = torch::zeros({classes, classes}, torch::TensorOptions().dtype(torch::kLong).device(device));
    for (int64_t start = 0; start < points.size(0); start += 64) {
      auto x = points.slice(0, start, start + 64).to(device);
      auto y = labels.slice(0, start, start + 64).to(device);
      // OK(torch-inference-without-no-grad): under the guard above.
      auto pred = net->forward(x).argmax(1);
      matrix.view(-1).index_add_(0, y * classes + pred, torch::ones_like(y));
    }
    return matrix.to(torch::kCPU, /*non_blocking=*/true);
  }
};

// Runs at the end of every epoch: a log line and a trip to the allocator.
struct EpochEndHook {
  void operator()(int64_t epoch) const {
    std::cout << "epoch " << epoch << " done\n";
    // BUG(torch-empty-cache-in-loop): train() calls the hook inside its epoch
    // loop; the cached blocks are freed and allocated again every epoch.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
};

void train(PointNet net, torch::Device device, int64_t epochs, const EpochEndHook &on_epoch_end) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  RotationBank bank(0.3);
  bank.to(device);
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t b = 0; b < 50; ++b) {
      auto points = torch::randn({32, 1024, 3}, device);
      auto labels = torch::randint(0, 10, {32}, torch::TensorOptions().dtype(torch::kLong).device(device));
      // OK(torch-device-mismatch): RotationBank::to() moved every matrix to
      // the points' device.
      auto rotated = torch::matmul(points, bank.rot[b % 3]);
      auto loss = torch::nn::functional::cross_entropy(net->forward(rotated), labels);
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    on_epoch_end(epoch);
  }
}

// Test-time augmentation: average the logits over the three rotations.
torch::Tensor predict_tta(PointNet net, const torch::Tensor &clouds, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto points = clouds.to(device);
  RotationBank bank(0.5);
  auto logits = net->forward(points);
  for (const auto &r : bank.rot) {
    // BUG(torch-device-mismatch): this bank was never moved; its matrices
    // are host tensors and the points are on 'device'.
    logits += net->forward(torch::matmul(points, r));
  }
  return logits / 4;
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  PointNet net(10);
  net->to(device);
  train(net, device, 20, EpochEndHook{});
  // OK(torch-empty-cache-in-loop): once, after training, before evaluation.
  c10::cuda::CUDACachingAllocator::emptyCache();

  auto tta = predict_tta(net, torch::randn({8, 1024, 3}), device);
  std::cout << "tta classes " << tta.argmax(1) << '\n';

  std::vector<torch::Tensor> clouds;
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < 100; ++i) {
    clouds.push_back(torch::randn({1024, 3}));
    labels.push_back(i % 10);
  }
  CloudAccuracy accuracy{net, device};
  std::cout << "accuracy " << accuracy(clouds, labels) << '\n';

  Confusion confusion{net, device, 10};
  auto host = confusion(torch::randn({512, 1024, 3}), torch::randint(0, 10, {512}, torch::kLong));
  // BUG(torch-non-blocking-d2h-race): the functor returned a non-blocking
  // copy of a matrix on 'device'; the diagonal is read before any sync.
  auto hits = host.diag().sum().item<int64_t>();
  std::cout << "confusion accuracy " << static_cast<double>(hits) / 512.0 << '\n';

  auto again = confusion(torch::randn({512, 1024, 3}), torch::randint(0, 10, {512}, torch::kLong));
  torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised before the read.
  std::cout << "second pass trace " << again.trace().item<int64_t>() << '\n';
  return 0;
}
