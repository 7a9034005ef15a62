// Two-tower retrieval for a news app: a user tower over the ids of the last
// clicked articles and an item tower over article ids, both an embedding
// bag followed by an MLP with dropout, trained with in-batch softmax. The
// model lives in a std::shared_ptr that the trainer and the serving-side
// retriever both hold. The epoch driver is configured with named phase
// hooks (std::function<void()> in a map), the way the team's recipe runner
// wires evaluation in. Interactions are synthesised from latent topics.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kUsers = 5000, kItems = 20000, kHist = 20, kDim = 64, kBatch = 256;

struct TowerImpl : torch::nn::Module {
  TowerImpl(int64_t vocab, double drop)
      : emb(register_module("emb", torch::nn::EmbeddingBag(
                                       torch::nn::EmbeddingBagOptions(vocab, 128).mode(torch::kMean)))),
        mlp(register_module("mlp", torch::nn::Sequential(torch::nn::Linear(128, 128), torch::nn::ReLU(),
                                                         torch::nn::Dropout(drop), torch::nn::Linear(128, kDim)))) {}

  // ids [B, L] -> unit vectors [B, kDim]
  torch::Tensor forward(const torch::Tensor &ids) { return F::normalize(mlp->forward(emb->forward(ids)), F::NormalizeFuncOptions().dim(1)); }

  torch::nn::EmbeddingBag emb;
  torch::nn::Sequential mlp;
};
TORCH_MODULE(Tower);

struct TwoTowerImpl : torch::nn::Module {
  TwoTowerImpl() : users(register_module("users", Tower(kItems, 0.2))), items(register_module("items", Tower(kItems, 0.2))) {}

  // In-batch logits [B, B]: user i against the clicked item of every row.
  torch::Tensor forward(const torch::Tensor &history, const torch::Tensor &clicked) {
    return torch::matmul(users->forward(history), items->forward(clicked).t()) / 0.05;
  }

  Tower users, items;
};

struct Interactions {
  torch::Tensor history, clicked;  // [B, kHist], [B, 1]
};

Interactions sample_interactions(int64_t n, std::mt19937 &rng) {
  std::uniform_int_distribution<int64_t> topic(0, 49), within(0, kItems / 50 - 1);
  Interactions b{torch::empty({n, kHist}, torch::kLong), torch::empty({n, 1}, torch::kLong)};
  auto h = b.history.accessor<int64_t, 2>();
  auto c = b.clicked.accessor<int64_t, 2>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = topic(rng);
    for (int64_t k = 0; k < kHist; ++k)
      h[i][k] = t * (kItems / 50) + within(rng);
    c[i][0] = t * (kItems / 50) + within(rng);
  }
  return b;
}

// Row i's positive is column i.
torch::Tensor in_batch_labels(int64_t n) { return torch::arange(n, torch::kLong); }

class Trainer {
 public:
  Trainer(std::shared_ptr<TwoTowerImpl> model, torch::Device device)
      : model_(std::move(model)), device_(device), opt_(model_->parameters(), torch::optim::AdamOptions(1e-3)) {}

  void fit_epoch(int64_t steps, std::mt19937 &rng) {
    model_->train();
    const auto on_device = torch::TensorOptions().device(device_);
    std::map<std::string, torch::Tensor> metrics{{"loss", torch::zeros({}, on_device)}, {"reg", torch::zeros({}, on_device)}};
    for (int64_t step = 0; step < steps; ++step) {
      auto b = sample_interactions(kBatch, rng);
      auto logits = model_->forward(b.history.to(device_), b.clicked.to(device_));
      // BUG(torch-device-mismatch): in_batch_labels() builds the targets on
      // the CPU; the logits are on the trainer's device.
      auto ce = F::cross_entropy(logits, in_batch_labels(kBatch));
      auto reg = 1e-6 * model_->items->emb->weight.pow(2).sum();
      auto loss = ce + reg;
      opt_.zero_grad();
      loss.backward();
      opt_.step();
      // OK(torch-loss-accumulation-graph): detached before it is kept.
      metrics["reg"] += reg.detach();
      // BUG(torch-loss-accumulation-graph): the map element outlives the
      // step and keeps every step's graph alive.
      metrics["loss"] = metrics["loss"] + loss;
    }
    std::cout << "loss " << (metrics["loss"] / steps).item<double>() << " reg " << metrics["reg"].item<double>() << "\n";
  }

  std::shared_ptr<TwoTowerImpl> model() const { return model_; }

 private:
  std::shared_ptr<TwoTowerImpl> model_;
  torch::Device device_;
  torch::optim::Adam opt_;
};

// Recall@k with the other rows of the batch as the candidate pool.
double in_batch_recall(TwoTowerImpl &model, const Interactions &b, int64_t k, torch::Device device) {
  // OK(torch-eval-mode-missing): both callers switch to eval() first (the
  // epoch loop through the "before_eval" hook).
  auto logits = model.forward(b.history.to(device), b.clicked.to(device));
  auto top = std::get<1>(logits.topk(k, 1)).cpu();
  auto hits = top.eq(torch::arange(b.history.size(0)).unsqueeze(1)).any(1);
  return hits.to(torch::kFloat).mean().item<double>();
}

class Retriever {
 public:
  Retriever(std::shared_ptr<TwoTowerImpl> model, torch::Device device) : model_(std::move(model)), device_(device) {}

  void build_index() {
    model_->eval();
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> chunks;
    for (int64_t s = 0; s < kItems; s += 4096) {
      auto ids = torch::arange(s, std::min(s + 4096, kItems), torch::TensorOptions().dtype(torch::kLong).device(device_));
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): the
      // item tower runs in its owner's eval() mode, under the guard.
      chunks.push_back(model_->items->forward(ids.unsqueeze(1)));
    }
    index_ = torch::cat(chunks);
  }

  std::optional<std::vector<int64_t>> recommend(const torch::Tensor &history, int64_t k) const {
    if (!index_.defined() || history.numel() == 0)
      return std::nullopt;
    // BUG(torch-inference-without-no-grad): main() asks for every user in
    // a loop without a guard; build_index()'s guard ended with it.
    // OK(torch-eval-mode-missing): build_index() left the model in eval().
    auto u = model_->users->forward(history.to(device_).unsqueeze(0));
    auto top = std::get<1>(torch::matmul(u, index_.t()).topk(k, 1)).squeeze(0).cpu();
    return std::vector<int64_t>(top.data_ptr<int64_t>(), top.data_ptr<int64_t>() + k);
  }

 private:
  std::shared_ptr<TwoTowerImpl> model_;
  torch::Device device_;
  torch::Tensor index_;
};

int main() {
  torch::manual_seed(234);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto model = std::make_shared<TwoTowerImpl>();
  model->to(device);
  Trainer trainer(model, device);
  Retriever retriever(model, device);
  std::mt19937 rng(234);
  const auto probe = sample_interactions(1024, rng);

  trainer.fit_epoch(300, rng);
  {
    auto snapshot = trainer.model();
    torch::NoGradGuard no_grad;
    // BUG(torch-eval-mode-missing): the snapshot is the trainer's model,
    // still in train() after fit_epoch(): the towers' dropout is on.
    auto logits = snapshot->forward(probe.history.to(device), probe.clicked.to(device));
    std::cout << "warm-up in-batch accuracy "
              << logits.argmax(1).eq(torch::arange(1024, torch::TensorOptions().device(device))).to(torch::kFloat).mean().item<double>()
              << "\n";
  }

  std::map<std::string, std::function<void()>> hooks;
  hooks["before_eval"] = [&] { model->eval(); };
  hooks["after_eval"] = [&] { model->train(); };
  for (int epoch = 1; epoch < 4; ++epoch) {
    trainer.fit_epoch(300, rng);
    hooks.at("before_eval")();
    torch::NoGradGuard no_grad;
    std::cout << "epoch " << epoch << " recall@10 " << in_batch_recall(*model, probe, 10, device) << "\n";
    hooks.at("after_eval")();
  }

  {
    torch::NoGradGuard no_grad;
    auto cold = sample_interactions(512, rng);
    cold.history.narrow(1, 2, kHist - 2).fill_(0);  // users with two clicks so far
    // BUG(torch-eval-mode-missing): the "after_eval" hook put the model back
    // in train() at the end of the last epoch.
    auto logits = model->forward(cold.history.to(device), cold.clicked.to(device));
    std::cout << "cold-start top-1 " << logits.argmax(1).eq(torch::arange(512, torch::TensorOptions().device(device))).to(torch::kFloat).mean().item<double>() << "\n";
  }

  model->eval();
  {
    torch::NoGradGuard no_grad;
    std::cout << "final recall@10 " << in_batch_recall(*model, probe, 10, device) << "\n";
  }

  retriever.build_index();
  int64_t served = 0;
  for (int64_t user = 0; user < 200; ++user) {
    if (auto recs = retriever.recommend(probe.history[user], 10))
      served += static_cast<int64_t>(recs->size());
  }
  std::cout << "served " << served << " recommendations\n";
  return 0;
}
