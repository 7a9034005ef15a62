// Federated averaging (McMahan et al.) simulated in one process. Each client
// owns a private shard and a local copy of the model, trains a few local
// epochs per round, and reports its weights; the server averages them,
// weighted by shard size, into the global model it holds through a raw
// pointer handed out by the experiment. Clients live in a vector of
// std::unique_ptr and free their GPU memory between rounds.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <numeric>
#include <vector>

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(784, 200))),
        fc2(register_module("fc2", torch::nn::Linear(200, 10))) {}
  torch::Tensor forward(const torch::Tensor &x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

class Client {
 public:
  Client(int64_t id, int64_t samples, torch::Device device)
      : id_(id), device_(device), x_(torch::randn({samples, 784})), y_(torch::randint(0, 10, {samples}, torch::kLong)) {
    model_->to(device_);
  }

  int64_t samples() const { return x_.size(0); }
  Mlp &model() { return model_; }

  void pull(Mlp &global) {
    torch::NoGradGuard no_grad;
    auto src = global->parameters();
    auto dst = model_->parameters();
    for (size_t i = 0; i < src.size(); ++i)
      dst[i].copy_(src[i]);
  }

  void train_round(int local_epochs, int64_t bs) {
    torch::optim::SGD opt(model_->parameters(), torch::optim::SGDOptions(0.05));
    local_loss_ = torch::zeros({}, device_);
    for (int e = 0; e < local_epochs; ++e) {
      auto perm = torch::randperm(samples());
      for (int64_t b = 0; b + bs <= samples(); b += bs) {
        auto idx = perm.slice(0, b, b + bs);
        auto x = x_.index_select(0, idx).to(device_);
        auto y = y_.index_select(0, idx).to(device_);
        opt.zero_grad();
        auto loss = torch::nn::functional::cross_entropy(model_->forward(x), y);
        loss.backward();
        opt.step();
        // BUG(torch-loss-accumulation-graph): the member keeps every local
        // step's graph until the next round.
        local_loss_ += loss;
        // BUG(torch-host-sync-in-loop): printing the device loss copies it
        // to the host on every local step.
        std::cout << "client " << id_ << " loss " << loss << "\n";
      }
    }
  }

  void evict() {
    // BUG(torch-empty-cache-in-loop): every client empties the cache at the
    // end of every round (called from the round loop through std::for_each).
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

 private:
  int64_t id_;
  torch::Device device_;
  torch::Tensor x_, y_;
  Mlp model_;
  torch::Tensor local_loss_;
};

// Weighted average of the clients' parameters into *global.
void aggregate(Mlp *global, const std::vector<std::unique_ptr<Client>> &clients) {
  torch::NoGradGuard no_grad;
  const int64_t total = std::accumulate(clients.begin(), clients.end(), int64_t{0},
                                        [](int64_t acc, const auto &c) { return acc + c->samples(); });
  auto params = (*global)->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    auto avg = torch::zeros_like(params[i]);
    for (const auto &c : clients) {
      const double w = static_cast<double>(c->samples()) / static_cast<double>(total);
      // OK(torch-device-mismatch): zeros_like keeps the global's device and
      // every client model is on the same device.
      avg += c->model()->parameters()[i] * w;
    }
    params[i].copy_(avg);
  }
}

double evaluate(Mlp &global, const torch::Tensor &x, const torch::Tensor &y) {
  torch::NoGradGuard no_grad;
  global->eval();
  double correct = 0;
  for (int64_t b = 0; b < x.size(0); b += 1000) {
    // OK(torch-inference-without-no-grad): the guard covers the loop.
    auto logits = global->forward(x.slice(0, b, b + 1000));
    correct += logits.argmax(1).eq(y.slice(0, b, b + 1000)).sum().item<double>();
  }
  global->train();
  return correct / static_cast<double>(x.size(0));
}

int main() {
  torch::manual_seed(2);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Mlp global_model;
  global_model->to(device);
  Mlp *global = &global_model;

  std::vector<std::unique_ptr<Client>> clients;
  for (int64_t k = 0; k < 10; ++k)
    clients.push_back(std::make_unique<Client>(k, 600 + 50 * k, device));

  auto test_x = torch::randn({10000, 784}).to(device);
  auto test_y = torch::randint(0, 10, {10000}, torch::kLong).to(device);
  // BUG(torch-device-mismatch): the server-side calibration batch stays on
  // the host while the global model is on the device.
  auto calib = (*global)->forward(torch::randn({256, 784}));
  std::cout << "calibration logits " << calib.sizes() << "\n";

  for (int round = 0; round < 50; ++round) {
    for (auto &c : clients) {
      c->pull(*global);
      c->train_round(/*local_epochs=*/2, /*bs=*/32);
    }
    aggregate(global, clients);
    std::for_each(clients.begin(), clients.end(), [](const std::unique_ptr<Client> &c) { c->evict(); });
    // OK(torch-host-sync-in-loop): every 5 rounds, and the read is in
    // evaluate()'s own loop.
    if (round % 5 == 0)
      std::cout << "round " << round << " acc " << evaluate(global_model, test_x, test_y) << "\n";
  }
  return 0;
}
