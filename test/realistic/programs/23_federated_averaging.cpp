// Federated averaging simulated in one process: a global model, a vector of
// client models trained on their own shards, half-precision update uploads,
// and per-round hooks.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <vector>

struct FedConfig {
  int64_t clients = 8;
  int64_t rounds = 20;
  int64_t local_steps = 10;
  int64_t batch = 32;
  int64_t features = 40;
  int64_t classes = 5;
};

struct NetImpl : torch::nn::Module {
  NetImpl(int64_t in, int64_t classes)
      : fc1(register_module("fc1", torch::nn::Linear(in, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, classes))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

struct Shard {
  torch::Tensor x;
  torch::Tensor y;
};

void local_train(Net &client, const Shard &shard, const FedConfig &cfg, torch::Device device) {
  torch::optim::SGD opt(client->parameters(), torch::optim::SGDOptions(0.05));
  auto x = shard.x.to(device);
  auto y = shard.y.to(device);
  for (int64_t step = 0; step < cfg.local_steps; ++step) {
    auto idx = torch::randint(0, x.size(0), {cfg.batch}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto loss = torch::nn::functional::cross_entropy(client->forward(x.index_select(0, idx)), y.index_select(0, idx));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

std::vector<torch::Tensor> client_update(Net &client, Net &global) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> deltas;
  auto cp = client->parameters();
  auto gp = global->parameters();
  for (size_t i = 0; i < cp.size(); ++i) {
    auto delta = cp[i] - gp[i];
    // BUG(torch-tensor-to-discarded): the half-precision copy meant for the
    // upload is discarded; the float32 delta is sent.
    delta.to(torch::kHalf);
    deltas.push_back(delta);
  }
  return deltas;
}

void apply_updates(Net &global, const std::vector<std::vector<torch::Tensor>> &updates) {
  torch::NoGradGuard no_grad;
  auto gp = global->parameters();
  for (size_t i = 0; i < gp.size(); ++i) {
    std::vector<torch::Tensor> column;
    for (const auto &u : updates)
      column.push_back(u[i].to(gp[i].dtype()));
    gp[i].add_(torch::stack(column).mean(0));
  }
}

std::vector<std::function<void()>> make_round_hooks() {
  std::vector<std::function<void()>> hooks;
  hooks.push_back([] { std::cout << "round finished\n"; });
  hooks.push_back([] {
    // BUG(torch-empty-cache-in-loop): main() runs every hook after every
    // round; this one drains and frees the cache each time.
    c10::cuda::CUDACachingAllocator::emptyCache();
  });
  return hooks;
}

int main() {
  FedConfig cfg;
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Net global(cfg.features, cfg.classes);
  global->to(device);
  std::vector<Net> clients;
  std::vector<Shard> shards;
  for (int64_t k = 0; k < cfg.clients; ++k) {
    clients.push_back(Net(cfg.features, cfg.classes));
    shards.push_back({torch::randn({512, cfg.features}), torch::randint(0, cfg.classes, {512}, torch::kLong)});
  }
  for (auto &c : clients)
    c->to(device);
  auto holdout_x = torch::randn({256, cfg.features});
  auto holdout_y = torch::randint(0, cfg.classes, {256}, torch::kLong);
  auto hooks = make_round_hooks();

  for (int64_t round = 0; round < cfg.rounds; ++round) {
    std::vector<std::vector<torch::Tensor>> updates;
    for (size_t k = 0; k < clients.size(); ++k) {
      {
        torch::NoGradGuard no_grad;
        auto cp = clients[k]->parameters();
        auto gp = global->parameters();
        for (size_t i = 0; i < cp.size(); ++i)
          cp[i].copy_(gp[i]);
      }
      local_train(clients[k], shards[k], cfg, device);
      updates.push_back(client_update(clients[k], global));
    }
    apply_updates(global, updates);
    {
      torch::NoGradGuard no_grad;
      for (auto &c : clients) {
        // BUG(torch-device-mismatch): every client was moved to 'device';
        // the hold-out batch is still on the host.
        auto logits = c->forward(holdout_x);
        std::cout << "client accuracy " << logits.argmax(1).eq(holdout_y).to(torch::kFloat).mean().item<double>() << '\n';
      }
    }
    for (auto &hook : hooks)
      hook();
  }
  return 0;
}
