// Two-tower retrieval for a video feed: a user tower (user id + bag of the
// last 20 clicked items) and an item tower map into one 32-d space, trained
// with a sampled softmax over in-batch positives and popularity-sampled
// negatives. The trainer runs epoch hooks registered by main(). After
// training the whole catalogue is encoded into a flat host index, recall@50
// is measured on held-out clicks, and a single user query is served.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kUsers = 5000, kItems = 20000, kDim = 32, kHistory = 20;

struct Batch {
  torch::Tensor users;    // [B]
  torch::Tensor history;  // [B, 20] recently clicked items
  torch::Tensor items;    // [B] the next click
};

Batch synth_batch(int64_t n, bool pin) {
  auto fix = [pin](const torch::Tensor &t) { return pin ? t.pin_memory() : t; };
  auto users = torch::randint(kUsers, {n}, torch::kLong);
  auto history = torch::randint(kItems, {n, kHistory}, torch::kLong);
  auto items = (history.select(1, kHistory - 1) * 7 + users) % kItems;
  return {fix(users), fix(history), fix(items)};
}

struct UserTowerImpl : nn::Module {
  UserTowerImpl()
      : id(register_module("id", nn::Embedding(kUsers, 32))),
        clicks(register_module("clicks", nn::EmbeddingBag(nn::EmbeddingBagOptions(kItems, 32).mode(torch::kMean)))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(64, 64), nn::ReLU(), nn::Linear(64, kDim)))) {}
  torch::Tensor forward(const torch::Tensor &users, const torch::Tensor &history) {
    auto h = torch::cat({id(users), clicks(history)}, 1);
    return F::normalize(mlp->forward(h), F::NormalizeFuncOptions().dim(1));
  }
  nn::Embedding id;
  nn::EmbeddingBag clicks;
  nn::Sequential mlp;
};
TORCH_MODULE(UserTower);

struct ItemTowerImpl : nn::Module {
  ItemTowerImpl()
      : id(register_module("id", nn::Embedding(kItems, 48))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(48, 64), nn::ReLU(), nn::Linear(64, kDim)))) {}
  torch::Tensor forward(const torch::Tensor &items) {
    return F::normalize(mlp->forward(id(items)), F::NormalizeFuncOptions().dim(1));
  }
  nn::Embedding id;
  nn::Sequential mlp;
};
TORCH_MODULE(ItemTower);

std::vector<torch::Tensor> all_parameters(UserTower &u, ItemTower &i) {
  auto params = u->parameters();
  for (auto &p : i->parameters())
    params.push_back(p);
  return params;
}

class TwoTowerTrainer {
 public:
  TwoTowerTrainer(UserTower u, ItemTower i, torch::Device device, double temperature)
      : users_(std::move(u)), items_(std::move(i)), device_(device), temperature_(temperature),
        opt_(all_parameters(users_, items_), torch::optim::AdamOptions(1e-3)),
        popularity_(torch::arange(1, kItems + 1, torch::kFloat).pow(-0.8)) {}
  void on_epoch_end(std::function<void(int, double)> hook) { hooks_.push_back(std::move(hook)); }

  void fit(const std::vector<Batch> &data, int epochs) {
    for (int epoch = 0; epoch < epochs; ++epoch) {
      auto epoch_loss = torch::zeros({}, device_);
      for (const auto &b : data) {
        // OK(torch-non-blocking-pageable): main() pins the training batches when it trains on CUDA.
        auto users = b.users.to(device_, /*non_blocking=*/true);
        auto history = b.history.to(device_, /*non_blocking=*/true);
        auto items = b.items.to(device_, /*non_blocking=*/true);
        auto negatives = torch::multinomial(popularity_, b.items.size(0), /*replacement=*/true).to(device_);
        std::vector<torch::Tensor> item_parts;
        for (const auto &ids : {items, negatives})
          // OK(torch-inference-without-no-grad, torch-loss-accumulation-graph): backward() below runs through the parts.
          item_parts.push_back(items_->forward(ids));
        auto u = users_->forward(users, history);
        auto logits = u.matmul(torch::cat(item_parts).t()) / temperature_;
        // OK(torch-device-mismatch): the labels are made with the logits' options.
        auto labels = torch::arange(u.size(0), logits.options().dtype(torch::kLong));
        auto loss = F::cross_entropy(logits, labels);
        opt_.zero_grad();
        loss.backward();
        opt_.step();
        epoch_loss += loss.detach();
      }
      // OK(torch-host-sync-in-loop): once per epoch, outside the batch loop.
      const double mean = epoch_loss.item<double>() / static_cast<double>(data.size());
      for (auto &hook : hooks_)
        hook(epoch, mean);
    }
  }

 private:
  UserTower users_;
  ItemTower items_;
  torch::Device device_;
  double temperature_;
  torch::optim::Adam opt_;
  torch::Tensor popularity_;  // Zipf-like sampling weights, on the host
  std::vector<std::function<void(int, double)>> hooks_;
};

torch::Tensor encode_catalogue(ItemTower &tower, const torch::Device &device, int64_t chunk) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (int64_t start = 0; start < kItems; start += chunk) {
    auto ids = torch::arange(start, std::min(start + chunk, kItems), torch::kLong).to(device);
    // OK(torch-inference-without-no-grad, torch-loss-accumulation-graph): the guard above.
    parts.push_back(tower->forward(ids));
  }
  return torch::cat(parts);
}

torch::Tensor encode_catalogue_safe(ItemTower &tower, const torch::Device &device) {
  try {
    return encode_catalogue(tower, device, 16384);
  } catch (const c10::OutOfMemoryError &) {
    // OK(torch-empty-cache-oom-retry): the retry uses chunks 16 times smaller.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return encode_catalogue(tower, device, 1024);
  }
}

void fence(const torch::Device &device) {
  if (device.is_cuda())
    torch::cuda::synchronize();
}

using UserEncoder = std::function<torch::Tensor(const Batch &)>;

// Recall@k of the held-out next click against the whole catalogue.
double recall_at_k(const UserEncoder &encode_users, const torch::Tensor &item_bank, const std::vector<Batch> &heldout,
                   int64_t k) {
  double hits = 0.0, total = 0.0;
  for (const auto &b : heldout) {
    auto topk = std::get<1>(encode_users(b).matmul(item_bank.t()).topk(k, 1));
    // OK(torch-host-sync-in-loop, torch-device-mismatch): evaluation, no training; the truth is moved to topk's device.
    hits += (topk == b.items.to(topk.device()).unsqueeze(1)).any(1).sum().item<double>();
    total += static_cast<double>(b.items.size(0));
  }
  return hits / total;
}

struct Query {
  int64_t user;
  torch::Tensor vec;  // host copy of the user embedding
};

Query encode_query(UserTower &tower, int64_t user, const torch::Tensor &history, const torch::Device &device) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): embeddings, Linear and ReLU only: no layer depends on the mode.
  auto u = tower->forward(torch::tensor({user}, torch::kLong).to(device), history.unsqueeze(0).to(device));
  return {user, u.squeeze(0).to(torch::kCPU, /*non_blocking=*/true)};
}

class FlatIndex {
 public:
  explicit FlatIndex(torch::Tensor bank) : bank_(std::move(bank)) {}  // [items, 32] on the host
  std::vector<int64_t> search(const torch::Tensor &q, int64_t k) const {
    auto top = std::get<1>(bank_.matmul(q).topk(k)).contiguous();
    return {top.data_ptr<int64_t>(), top.data_ptr<int64_t>() + k};
  }

 private:
  torch::Tensor bank_;
};

int main() {
  torch::manual_seed(299);
  // OK(torch-cuda-unguarded): guarded selection.
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  std::vector<Batch> train, heldout;
  for (int i = 0; i < 120; ++i)
    train.push_back(synth_batch(256, device.is_cuda()));
  for (int i = 0; i < 10; ++i)
    heldout.push_back(synth_batch(256, false));

  UserTower user_tower;
  ItemTower item_tower;
  user_tower->to(device);
  item_tower->to(device);
  TwoTowerTrainer trainer(user_tower, item_tower, device, 0.05);
  trainer.on_epoch_end([](int epoch, double loss) { std::cout << "epoch " << epoch << " loss " << loss << '\n'; });
  trainer.on_epoch_end([](int, double) {
    if (torch::cuda::is_available())
      // BUG(torch-empty-cache-in-loop): fit() runs every hook after every
      // epoch; the next epoch has to cudaMalloc the cache back.
      c10::cuda::CUDACachingAllocator::emptyCache();
  });
  trainer.fit(train, 6);

  auto bank_dev = encode_catalogue_safe(item_tower, device);
  UserEncoder encode_users = [&](const Batch &b) {
    // BUG(torch-inference-without-no-grad): recall_at_k() runs this on every
    // held-out batch with autograd on, keeping activations for no backward.
    // OK(torch-eval-mode-missing): no layer of the user tower depends on the mode.
    return user_tower->forward(b.users.to(device), b.history.to(device));
  };
  std::cout << "recall@50 " << recall_at_k(encode_users, bank_dev, heldout, 50) << '\n';

  auto bank_host = bank_dev.to(torch::kCPU, /*non_blocking=*/true);
  fence(device);
  // OK(torch-non-blocking-d2h-race): fence() synchronised before the index takes the bank.
  FlatIndex index(bank_host);
  Query q = encode_query(user_tower, 42, heldout.front().history[0], device);
  // BUG(torch-non-blocking-d2h-race): the query's embedding was copied back
  // with non_blocking and nothing synchronised before search() reads it.
  auto recs = index.search(q.vec, 10);
  std::cout << "user " << q.user << ":";
  for (int64_t item : recs)
    std::cout << ' ' << item;
  std::cout << '\n';
}
