// Online two-tower recommender trained as a contextual bandit: served
// impressions land in a bounded replay buffer (a std::deque of interactions),
// the learner samples it with torch::stack, scores positives against sampled
// negatives, and the serving path explores epsilon-greedily. Item priors
// (log popularity) live in a name-keyed map next to the model.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <deque>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace recsys {

constexpr int64_t kUsers = 500, kItems = 2000;

struct Config {
  torch::Device device = torch::kCPU;
  int64_t dim = 32;
  int64_t negatives = 4;
  double lr = 5e-3;
};

struct TwoTowerImpl : nn::Module {
  explicit TwoTowerImpl(int64_t dim)
      : user_emb(register_module("user_emb", nn::Embedding(kUsers, dim))),
        item_emb(register_module("item_emb", nn::Embedding(kItems, dim))),
        user_mlp(register_module("user_mlp", nn::Sequential(nn::Linear(dim, dim), nn::ReLU(), nn::Dropout(0.1),
                                                            nn::Linear(dim, dim)))) {}
  // users: [B], items: [B, K]  ->  logits [B, K]
  torch::Tensor score(const torch::Tensor &users, const torch::Tensor &items) {
    auto u = user_mlp->forward(user_emb->forward(users)).unsqueeze(1);
    return (u * item_emb->forward(items)).sum(-1);
  }
  nn::Embedding user_emb, item_emb;
  nn::Sequential user_mlp;
};
TORCH_MODULE(TwoTower);

TwoTower make_model(const Config &cfg) {
  TwoTower model(cfg.dim);
  model->to(cfg.device);
  return model;
}

torch::Tensor sample_negatives(int64_t rows, int64_t k) { return torch::randint(0, kItems, {rows, k}, torch::kLong); }

template <typename... Ts>
auto on_device(torch::Device device, const Ts &...ts) {
  return std::make_tuple(ts.to(device)...);
}

struct Interaction {
  torch::Tensor user, item, reward;  // 0-dim each
};

class ReplayBuffer {
 public:
  explicit ReplayBuffer(size_t capacity) : capacity_(capacity) {}
  void record(int64_t user, int64_t item, float reward) {
    buffer_.push_back({torch::tensor(user), torch::tensor(item), torch::tensor(reward)});
    if (buffer_.size() > capacity_)
      buffer_.pop_front();
  }
  struct Sample {
    torch::Tensor users, items, rewards;  // [n]
  };
  Sample sample(size_t n, std::mt19937 &rng) const {
    std::uniform_int_distribution<size_t> pick(0, buffer_.size() - 1);
    std::vector<torch::Tensor> users, items, rewards;
    for (size_t i = 0; i < n; ++i) {
      const auto &it = buffer_[pick(rng)];
      users.push_back(it.user);
      items.push_back(it.item);
      rewards.push_back(it.reward);
    }
    return {torch::stack(users), torch::stack(items), torch::stack(rewards)};
  }
  size_t size() const { return buffer_.size(); }

 private:
  size_t capacity_;
  std::deque<Interaction> buffer_;
};

class BanditLearner {
 public:
  BanditLearner(const Config &cfg, const std::vector<int64_t> &item_counts)
      : cfg_(cfg), model_(make_model(cfg)), opt_(model_->parameters(), torch::optim::AdamOptions(cfg.lr)) {
    auto counts = torch::tensor(item_counts, torch::kFloat);
    priors_["log_popularity"] = torch::log1p(counts) - torch::log1p(counts).mean();
    priors_["novelty"] = -priors_["log_popularity"];
  }

  void update(const ReplayBuffer &buffer, std::mt19937 &rng) {
    model_->train();
    auto s = buffer.sample(256, rng);
    auto users = s.users.to(cfg_.device);
    auto rewards = s.rewards.to(cfg_.device);
    opt_.zero_grad();
    // BUG(torch-device-mismatch): the users were moved but the stacked items
    // of the replay sample were not; the item tower meets a host index.
    auto pos = model_->score(users, s.items.unsqueeze(1)).squeeze(1);
    // BUG(torch-device-mismatch): sample_negatives() draws on the CPU.
    auto neg = model_->score(users, sample_negatives(users.size(0), cfg_.negatives));
    // OK(torch-device-mismatch): the negative labels are made like the logits.
    auto loss = F::binary_cross_entropy_with_logits(pos, rewards) +
                F::binary_cross_entropy_with_logits(neg, torch::zeros_like(neg));
    loss.backward();
    opt_.step();
  }

  torch::Tensor recommend(const torch::Tensor &users, double epsilon) {
    torch::NoGradGuard no_grad;
    model_->eval();
    const auto n = users.size(0);
    // OK(torch-device-mismatch): the catalogue index follows the users' options.
    auto all = torch::arange(kItems, users.options()).expand({n, kItems});
    auto greedy = model_->score(users, all).argmax(1);
    auto random = torch::randint(0, kItems, {n}, users.options());
    auto explore = torch::rand({n}) < epsilon;
    // BUG(torch-device-mismatch): the exploration coin flips were drawn on
    // the host; torch::where mixes them with device item ids.
    auto picked = torch::where(explore, random, greedy);
    model_->train();
    return picked;
  }

  torch::Tensor trending_for(const torch::Tensor &users, int64_t k) {
    torch::NoGradGuard no_grad;
    model_->eval();
    auto all = torch::arange(kItems, users.options()).expand({users.size(0), kItems});
    // BUG(torch-device-mismatch): the priors in the map were built on the
    // host from the item counts and never moved.
    auto scores = model_->score(users, all) + 0.5 * priors_.at("log_popularity") + 0.1 * priors_.at("novelty");
    model_->train();
    return std::get<1>(scores.topk(k, 1));
  }

  double hit_rate_at_10(const ReplayBuffer &buffer, std::mt19937 &rng) {
    torch::NoGradGuard no_grad;
    model_->eval();
    auto s = buffer.sample(512, rng);
    // OK(torch-device-mismatch): both come back from on_device() on the device.
    auto [users, items] = on_device(cfg_.device, s.users, s.items);
    // BUG(torch-device-mismatch): the 99 sampled negatives are on the CPU,
    // concatenated with the positives on the device.
    auto candidates = torch::cat({items.unsqueeze(1), sample_negatives(users.size(0), 99)}, 1);
    // OK(torch-device-mismatch): the prior is moved to the candidates' device first.
    auto prior = priors_.at("log_popularity").to(candidates.device());
    auto logits = model_->score(users, candidates) + prior.index_select(0, candidates.view(-1)).view({users.size(0), -1});
    auto rank_of_pos = (logits > logits.select(1, 0).unsqueeze(1)).sum(1);
    model_->train();
    return (rank_of_pos < 10).to(torch::kFloat).mean().item<double>();
  }

  TwoTower &model() { return model_; }

 private:
  Config cfg_;
  TwoTower model_;
  torch::optim::Adam opt_;
  std::map<std::string, torch::Tensor> priors_;
};

void export_item_index(TwoTower &model) {
  if (torch::cuda::device_count() < 2)
    return;
  // OK(torch-device-index-unchecked, torch-cuda-unguarded): two devices were counted above.
  const torch::Device index_card(torch::kCUDA, 1);
  auto table = model->item_emb->weight.detach().to(index_card);
  std::cout << "item index on " << index_card << " norm " << table.norm().item<float>() << '\n';
}

}  // namespace recsys

int main() {
  using namespace recsys;
  std::mt19937 rng(355);
  Config cfg;
  // OK(torch-cuda-unguarded): CUDA only when it is available.
  cfg.device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);

  std::vector<int64_t> counts(kItems);
  std::uniform_int_distribution<int64_t> any_user(0, kUsers - 1), any_item(0, kItems - 1);
  for (auto &c : counts)
    c = any_item(rng) % 50;
  BanditLearner learner(cfg, counts);
  ReplayBuffer buffer(20000);
  std::bernoulli_distribution clicked(0.3);

  // Exploration phase: log impressions of the initial policy.
  for (int round = 0; round < 40; ++round) {
    auto users = torch::randint(0, kUsers, {64}, torch::TensorOptions().dtype(torch::kLong).device(cfg.device));
    auto shown = learner.recommend(users, 0.3).cpu();
    auto users_host = users.cpu();
    for (int64_t i = 0; i < 64; ++i)
      buffer.record(users_host[i].item<int64_t>(), shown[i].item<int64_t>(), clicked(rng) ? 1.0f : 0.0f);
  }
  // Learning phase on the logged feedback.
  for (int step = 0; step < 200; ++step) {
    learner.update(buffer, rng);
    if (step % 50 == 49)
      std::cout << "step " << step << " HR@10 " << learner.hit_rate_at_10(buffer, rng) << '\n';
  }
  std::cout << learner.trending_for(torch::arange(4, torch::TensorOptions().dtype(torch::kLong).device(cfg.device)), 5)
            << '\n';
  export_item_index(learner.model());
}
