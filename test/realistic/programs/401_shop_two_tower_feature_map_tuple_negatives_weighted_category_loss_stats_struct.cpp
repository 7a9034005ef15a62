// Two-tower retrieval for an online shop: a user tower (id, hour of day and
// dense session features) and an item tower are trained with sampled
// negatives, next to a next-category head whose loss weights rare categories
// up. Features are hashed on the host into a name -> tensor map; the dense
// features are standardised with statistics computed once over the history.
// After training, the service returns the top-k items per user.
#include <torch/torch.h>
#include <array>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace shop {
constexpr int64_t kUsers = 5000, kItems = 20000, kCategories = 12, kDense = 6, kDim = 32, kNegatives = 8;
constexpr double kTemperature = 0.1;

struct Event {
  int64_t user, item, hour, category;
  std::array<float, kDense> dense;  // dwell time, scroll depth, cart size, ...
};

using FeatureMap = std::map<std::string, torch::Tensor>;

// Sparse ids for one batch of events, hashed into the embedding tables.
FeatureMap hash_features(const std::vector<Event> &events) {
  std::vector<int64_t> users, items, hours, categories;
  for (const auto &e : events) {
    users.push_back((e.user * 2654435761LL) % kUsers);
    items.push_back(e.item % kItems);
    hours.push_back(e.hour);
    categories.push_back(e.category);
  }
  FeatureMap f;
  f["user"] = torch::tensor(users);
  f["item"] = torch::tensor(items);
  f["hour"] = torch::tensor(hours);
  f["category"] = torch::tensor(categories);
  return f;
}

torch::Tensor dense_features(const std::vector<Event> &events) {
  std::vector<float> flat;
  for (const auto &e : events) flat.insert(flat.end(), e.dense.begin(), e.dense.end());
  return torch::tensor(flat).view({static_cast<int64_t>(events.size()), kDense});
}

struct FeatureStats {
  torch::Tensor mean, std;
  FeatureStats to(torch::Device device) const { return {mean.to(device), std.to(device)}; }
  torch::Tensor apply(const torch::Tensor &x) const { return (x - mean) / std; }
};

struct UserTowerImpl : nn::Module {
  UserTowerImpl()
      : ids(register_module("ids", nn::Embedding(kUsers, kDim))),
        hours(register_module("hours", nn::Embedding(24, 8))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(kDim + 8 + kDense, 64), nn::ReLU(), nn::Dropout(0.2),
                                                  nn::Linear(64, kDim)))) {}
  torch::Tensor forward(const torch::Tensor &user, const torch::Tensor &hour, const torch::Tensor &dense) {
    auto h = mlp->forward(torch::cat({ids->forward(user), hours->forward(hour), dense}, 1));
    return F::normalize(h, F::NormalizeFuncOptions().dim(-1));
  }
  nn::Embedding ids, hours;
  nn::Sequential mlp;
};
TORCH_MODULE(UserTower);

struct ItemTowerImpl : nn::Module {
  ItemTowerImpl() : ids(register_module("ids", nn::Embedding(kItems, kDim))) {}
  torch::Tensor forward(const torch::Tensor &item) {
    return F::normalize(ids->forward(item), F::NormalizeFuncOptions().dim(-1));
  }
  nn::Embedding ids;
};
TORCH_MODULE(ItemTower);

// Cross-entropy with inverse-frequency class weights.
struct WeightedCategoryLossImpl : nn::Module {
  explicit WeightedCategoryLossImpl(const std::vector<double> &frequency)
      : weight(torch::tensor(frequency).clamp_min(1e-4).reciprocal()) {
    weight /= weight.mean();
  }
  torch::Tensor forward(const torch::Tensor &logits, const torch::Tensor &target) {
    return F::cross_entropy(logits, target, F::CrossEntropyFuncOptions().weight(weight));
  }
  torch::Tensor weight;  // a plain member: no register_buffer
};
TORCH_MODULE(WeightedCategoryLoss);

// (positives, K random negatives per row, 1/0 labels)
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> sample_negatives(const torch::Tensor &positives, int64_t k,
                                                                         torch::Device device) {
  const int64_t b = positives.size(0);
  auto negatives = torch::randint(0, kItems, {b, k});
  auto labels = torch::cat({torch::ones({b, 1}), torch::zeros({b, k})}, 1).to(device);
  return {positives.to(device), negatives, labels};
}

struct Recs {
  torch::Tensor items, scores;  // B x k on the host
};

class RetrievalTrainer {
 public:
  RetrievalTrainer(torch::Device device, const FeatureStats &stats, const std::vector<double> &frequency)
      : device_(device), host_stats_(stats), stats_(stats.to(device)), criterion_(frequency),
        opt_(parameters(), torch::optim::AdamOptions(2e-3)) {
    users_->to(device_);
    items_->to(device_);
    head_->to(device_);
    criterion_->to(device_);
  }

  torch::Tensor train_step(const std::vector<Event> &events) {
    users_->train();
    auto features = hash_features(events);
    // BUG(torch-non-blocking-pageable): hash_features() built every id tensor with torch::tensor, in pageable memory.
    for (auto &[name, t] : features) t = t.to(device_, /*non_blocking=*/true);
    // OK(torch-device-mismatch): the device copy of the statistics.
    auto dense = stats_.apply(dense_features(events).to(device_));
    auto u = users_->forward(features.at("user"), features.at("hour"), dense);
    auto [pos, neg, labels] = sample_negatives(features.at("item"), kNegatives, device_);
    // OK(torch-device-mismatch): sample_negatives() moved the positives.
    auto pos_vec = items_->forward(pos);
    // BUG(torch-device-mismatch): sample_negatives() drew the negatives with torch::randint and returned them on the host.
    auto neg_vec = items_->forward(neg);
    auto logits = torch::cat({(u * pos_vec).sum(-1, true), torch::einsum("bd,bkd->bk", {u, neg_vec})}, 1);
    auto retrieval_loss = F::binary_cross_entropy_with_logits(logits / kTemperature, labels);
    // BUG(torch-device-mismatch): the class weights are a plain member; criterion_->to(device_) left them on the host.
    auto category_loss = criterion_(head_->forward(u), features.at("category"));
    auto loss = retrieval_loss + 0.3 * category_loss;
    opt_.zero_grad();
    loss.backward();
    opt_.step();
    return loss.detach();
  }

  Recs recommend(const std::vector<Event> &queries, int64_t k) {
    torch::NoGradGuard no_grad;
    users_->eval();
    auto features = hash_features(queries);
    // BUG(torch-device-mismatch): apply() meets the batch on device_ with the host copy of the statistics kept for export.
    auto dense = host_stats_.apply(dense_features(queries).to(device_));
    auto u = users_->forward(features.at("user").to(device_), features.at("hour").to(device_), dense);
    auto bank = items_->forward(torch::arange(kItems, torch::TensorOptions().dtype(torch::kLong).device(device_)));
    auto top = torch::matmul(u, bank.t()).topk(k, 1);
    return {std::get<1>(top).to(torch::kCPU, /*non_blocking=*/true), std::get<0>(top).to(torch::kCPU, /*non_blocking=*/true)};
  }

  const FeatureStats &host_stats() const { return host_stats_; }

 private:
  std::vector<torch::Tensor> parameters() {
    std::vector<torch::Tensor> params;
    for (const auto &module : std::vector<std::shared_ptr<nn::Module>>{users_.ptr(), items_.ptr(), head_.ptr()})
      for (const auto &p : module->parameters()) params.push_back(p);
    return params;
  }

  torch::Device device_;
  FeatureStats host_stats_, stats_;
  UserTower users_;
  ItemTower items_;
  nn::Linear head_{kDim, kCategories};
  WeightedCategoryLoss criterion_;
  torch::optim::Adam opt_;
};

std::vector<Event> synth_events(std::mt19937 &rng, int64_t n) {
  std::uniform_int_distribution<int64_t> user(0, 1 << 20), item(0, kItems - 1), hour(0, 23);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::vector<Event> events;
  for (int64_t i = 0; i < n; ++i) {
    Event e{user(rng), item(rng), hour(rng), 0, {}};
    e.category = (e.item * 7 + e.hour) % kCategories;
    for (auto &d : e.dense) d = 3.0f + noise(rng) * (1.0f + static_cast<float>(e.category));
    events.push_back(e);
  }
  return events;
}

void write_recs(const std::string &path, const Recs &recs) {
  std::ofstream out(path);
  auto items = recs.items.accessor<int64_t, 2>();
  for (int64_t r = 0; r < items.size(0); ++r) {
    for (int64_t c = 0; c < items.size(1); ++c) out << items[r][c] << (c + 1 < items.size(1) ? '\t' : '\n');
  }
}
}  // namespace shop

int main() {
  using namespace shop;
  std::mt19937 rng(401);
  torch::manual_seed(401);
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports it.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  auto history = synth_events(rng, 4096);
  auto all_dense = dense_features(history);
  FeatureStats stats{all_dense.mean(0), all_dense.std(0).clamp_min(1e-6)};
  std::vector<double> frequency(kCategories, 0.0);
  for (const auto &e : history) frequency[static_cast<size_t>(e.category)] += 1.0 / history.size();

  RetrievalTrainer trainer(device, stats, frequency);
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    auto running = torch::zeros({}, torch::TensorOptions().device(device));
    for (int64_t step = 1; step <= 200; ++step) {
      running += trainer.train_step(synth_events(rng, 256));
      // OK(torch-host-sync-in-loop): printed every 100 steps.
      if (step % 100 == 0) std::cout << "epoch " << epoch << " step " << step << " loss " << (running / step).item<double>() << '\n';
    }
  }

  auto recs = trainer.recommend(synth_events(rng, 4), 10);
  // BUG(torch-non-blocking-d2h-race): recommend() returned host copies that are still in flight; the print reads them.
  std::cout << "top items for the first user: " << recs.items[0] << '\n';

  auto nightly = trainer.recommend(synth_events(rng, 512), 50);
  if (device.is_cuda()) torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised first whenever the copies can be asynchronous.
  write_recs("nightly_recs.tsv", nightly);
  return 0;
}
