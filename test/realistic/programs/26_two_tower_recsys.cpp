// A two-tower recommender: user and item features come from a feature store
// as named tensors, a ranker trains both towers with sampled softmax and
// serves top-k candidates. The ranker was written for the GPU serving fleet.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

using Features = std::map<std::string, torch::Tensor>;

class FeatureStore {
 public:
  FeatureStore(int64_t users, int64_t items, int64_t dim) : users_(users), items_(items), dim_(dim) {}
  Features lookup(int64_t batch) const {
    Features f;
    f["user"] = torch::randn({batch, dim_});
    f["item"] = torch::randn({batch, dim_});
    f["user_id"] = torch::randint(0, users_, {batch}, torch::kLong);
    return f;
  }
  torch::Tensor all_items() const { return torch::randn({items_, dim_}); }

 private:
  int64_t users_, items_, dim_;
};

struct TowerImpl : torch::nn::Module {
  explicit TowerImpl(int64_t dim)
      : fc1(register_module("fc1", torch::nn::Linear(dim, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 64))) {}
  torch::Tensor forward(torch::Tensor x) {
    return torch::nn::functional::normalize(fc2(torch::relu(fc1(x))),
                                            torch::nn::functional::NormalizeFuncOptions().dim(1));
  }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Tower);

class Ranker {
 public:
  explicit Ranker(int64_t dim) : user_tower_(dim), item_tower_(dim) {
    user_tower_->to(device_);
    item_tower_->to(device_);
    auto params = user_tower_->parameters();
    for (auto &p : item_tower_->parameters())
      params.push_back(p);
    opt_ = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-3));
  }

  std::tuple<torch::Tensor, torch::Tensor> train_step(Features &f) {
    auto user = f["user"].to(device_);
    // BUG(torch-non-blocking-pageable): the feature store fills its map with
    // torch::randn results, pageable memory.
    auto item = f["item"].to(device_, /*non_blocking=*/true);
    auto logits = torch::mm(user_tower_->forward(user), item_tower_->forward(item).t()) / 0.05;
    auto labels = torch::arange(logits.size(0), torch::TensorOptions().dtype(torch::kLong).device(device_));
    auto loss = torch::nn::functional::cross_entropy(logits, labels);
    opt_->zero_grad();
    loss.backward();
    opt_->step();
    auto hits = logits.argmax(1).eq(labels).sum();
    return {loss.detach(), hits};
  }

  double user_norm(const FeatureStore &store) {
    torch::NoGradGuard no_grad;
    auto f = store.lookup(8);
    // BUG(torch-device-mismatch): the towers are on device_, the feature
    // map's tensors on the host.
    auto emb = user_tower_->forward(f.at("user"));
    return emb.norm().item<double>();
  }

  void score_candidates(const torch::Tensor &user_features, const torch::Tensor &items) {
    torch::NoGradGuard no_grad;
    auto u = user_tower_->forward(user_features.to(device_));
    auto v = item_tower_->forward(items.to(device_));
    scores_host_ = torch::mv(v, u.squeeze(0)).to(torch::kCPU, /*non_blocking=*/true);
  }

  std::vector<int64_t> top_k(int64_t k) const {
    // BUG(torch-non-blocking-d2h-race): score_candidates() started the copy
    // into scores_host_ and nothing synchronised since.
    auto s = scores_host_.accessor<float, 1>();
    std::vector<int64_t> idx(static_cast<size_t>(s.size(0)));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) { return s[a] > s[b]; });
    idx.resize(static_cast<size_t>(k));
    return idx;
  }

 private:
  // BUG(torch-cuda-unguarded): every Ranker is constructed without an
  // is_available() check, so this default selects CUDA unconditionally.
  torch::Device device_{torch::kCUDA};
  Tower user_tower_, item_tower_;
  std::unique_ptr<torch::optim::Adam> opt_;
  torch::Tensor scores_host_;
};

int main() {
  const int64_t dim = 32;
  FeatureStore store(100000, 5000, dim);
  Ranker ranker(dim);
  int64_t total_hits = 0;
  for (int64_t step = 0; step < 1000; ++step) {
    auto features = store.lookup(256);
    auto [loss, hits] = ranker.train_step(features);
    // BUG(torch-host-sync-in-loop): hits lives on the ranker's CUDA device;
    // reading it every step stalls the pipeline.
    total_hits += hits.item<int64_t>();
  }
  std::cout << "in-batch hits " << total_hits << ", user norm " << ranker.user_norm(store) << '\n';
  ranker.score_candidates(store.lookup(1)["user"], store.all_items());
  for (auto i : ranker.top_k(10))
    std::cout << i << ' ';
  std::cout << '\n';
  return 0;
}
