// Two-tower retrieval for a video platform: a user tower and an item tower
// map ids to unit vectors, trained with an in-batch sampled softmax and the
// logQ correction for popular items (Yi et al., RecSys 2019). Interactions
// are drawn from a Zipf popularity law; the log keeps them as CPU tensors and
// hands out batches as narrow views. The model is assembled by a small
// builder that owns the target device. After training, the service scores a
// held-out slice and serves one user's top-k from a candidate pool.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <utility>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace recsys {

constexpr int64_t kUsers = 5000, kItems = 20000, kBatch = 512;

// Zipf(1.1) probabilities over the catalogue, most popular item first.
torch::Tensor zipf_probs(int64_t n) {
  auto p = torch::pow(torch::arange(1, n + 1, torch::kFloat), -1.1);
  return p / p.sum();
}

namespace {
torch::Tensor build_log_q() { return torch::log(zipf_probs(kItems)); }
}  // namespace

// log Q(item), the probability that the sampler shows an item in a batch; built once.
const torch::Tensor &item_log_q() {
  static torch::Tensor table = build_log_q();
  return table;
}

struct Interactions {
  torch::Tensor users, items;  // both kLong, one row per interaction
};

class InteractionLog {
 public:
  InteractionLog(int64_t n, int64_t held_out)
      : users_(torch::randint(kUsers, {n}, torch::kLong)),
        items_(torch::multinomial(zipf_probs(kItems), n, /*replacement=*/true)),
        holdout_{torch::randint(kUsers, {held_out}, torch::kLong),
                 torch::multinomial(zipf_probs(kItems), held_out, /*replacement=*/true)} {}

  Interactions batch(int64_t step, int64_t size) const {
    const int64_t start = (step * size) % (users_.size(0) - size);
    return {users_.narrow(0, start, size), items_.narrow(0, start, size)};
  }
  const Interactions &holdout() const { return holdout_; }

 private:
  torch::Tensor users_, items_;
  Interactions holdout_;
};

struct TwoTowerImpl : nn::Module {
  TwoTowerImpl(int64_t users, int64_t items, int64_t dim)
      : user_emb(register_module("user_emb", nn::Embedding(users, dim))),
        item_emb(register_module("item_emb", nn::Embedding(items, dim))),
        user_mlp(register_module("user_mlp", nn::Sequential(nn::Linear(dim, 2 * dim), nn::ReLU(), nn::Dropout(0.1),
                                                             nn::Linear(2 * dim, dim)))),
        item_mlp(register_module("item_mlp", nn::Sequential(nn::Linear(dim, 2 * dim), nn::ReLU(), nn::Dropout(0.1),
                                                             nn::Linear(2 * dim, dim)))) {}

  // Scores U x I between every user and every item of the two id lists (temperature 0.05).
  torch::Tensor forward(const torch::Tensor &users, const torch::Tensor &items) {
    auto u = F::normalize(user_mlp->forward(user_emb->forward(users)), F::NormalizeFuncOptions().dim(1));
    auto v = F::normalize(item_mlp->forward(item_emb->forward(items)), F::NormalizeFuncOptions().dim(1));
    return torch::matmul(u, v.t()) / 0.05;
  }

  nn::Embedding user_emb, item_emb;
  nn::Sequential user_mlp, item_mlp;
};
TORCH_MODULE(TwoTower);

class TwoTowerBuilder {
 public:
  explicit TwoTowerBuilder(torch::Device device) : device_(device) {}
  TwoTowerBuilder &users(int64_t n) { users_ = n; return *this; }
  TwoTowerBuilder &items(int64_t n) { items_ = n; return *this; }
  TwoTowerBuilder &dim(int64_t d) { dim_ = d; return *this; }
  TwoTower build() const {
    TwoTower model(users_, items_, dim_);
    model->to(device_);
    return model;
  }

 private:
  torch::Device device_;
  int64_t users_ = 0, items_ = 0, dim_ = 64;
};

void train(TwoTower &model, const InteractionLog &log, torch::Device device, int64_t steps) {
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  model->train();
  int64_t hits = 0, seen = 0;
  auto track = [&hits, &seen](const torch::Tensor &scores, const torch::Tensor &labels) {
    // BUG(torch-host-sync-in-loop): called after every step below with the
    // in-batch scores on 'device'; .item() waits for the whole step.
    hits += scores.argmax(1).eq(labels).sum().item<int64_t>();
    seen += labels.size(0);
  };
  auto labels = torch::arange(kBatch, torch::TensorOptions().dtype(torch::kLong).device(device));
  for (int64_t step = 0; step < steps; ++step) {
    Interactions b = log.batch(step, kBatch);
    // BUG(torch-non-blocking-pageable): the batch is a view of the log's
    // torch::randint members, pageable memory.
    auto users = b.users.to(device, /*non_blocking=*/true);
    auto items = b.items.to(device);
    auto scores = model->forward(users, items);
    // BUG(torch-device-mismatch): item_log_q() is the static CPU table;
    // index_select() is given the ids on 'device'.
    auto logits = scores - item_log_q().index_select(0, items).unsqueeze(0);
    auto loss = F::cross_entropy(logits, labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
    track(scores.detach(), labels);
    if (step % 200 == 0)
      // OK(torch-host-sync-in-loop): every 200 steps.
      std::cout << "step " << step << " loss " << loss.item<double>() << '\n';
  }
  std::cout << "in-batch top-1 " << static_cast<double>(hits) / static_cast<double>(seen) << '\n';
}

struct Recommendations {
  torch::Tensor items, scores;  // host copies, best first
};

Recommendations recommend(TwoTower &model, int64_t user, const torch::Tensor &candidates, torch::Device device,
                          int64_t k) {
  torch::NoGradGuard no_grad;
  auto pool = candidates.to(device);
  auto scores = model->forward(torch::full({1}, user, torch::TensorOptions().dtype(torch::kLong).device(device)), pool);
  auto top = scores.squeeze(0).topk(k);
  auto ids = pool.index_select(0, std::get<1>(top));
  // OK(torch-device-mismatch): the candidate pool was moved with the scores.
  return {ids.to(torch::kCPU, /*non_blocking=*/true), std::get<0>(top).to(torch::kCPU, /*non_blocking=*/true)};
}

}  // namespace recsys

int main() {
  using namespace recsys;
  torch::manual_seed(338);
  // OK(torch-cuda-unguarded): CUDA only when it is available.
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  InteractionLog log(200000, 1024);
  TwoTower model = TwoTowerBuilder(device).users(kUsers).items(kItems).dim(64).build();
  train(model, log, device, 2000);

  model->eval();
  {
    torch::NoGradGuard no_grad;
    const Interactions &held = log.holdout();
    // BUG(torch-device-mismatch): the held-out ids come from the log's CPU
    // tensors; the builder put the model on 'device'.
    auto scores = model->forward(held.users, held.items);
    auto diag = torch::arange(scores.size(0), scores.options().dtype(torch::kLong));
    std::cout << "held-out in-batch top-1 " << scores.argmax(1).eq(diag).to(torch::kFloat).mean().item<double>()
              << '\n';
  }

  auto candidates = torch::randint(kItems, {4096}, torch::kLong);
  Recommendations rec = recommend(model, 42, candidates, device, 10);
  // BUG(torch-non-blocking-d2h-race): recommend() only queued the copies of
  // its results; the host walks the id buffer before they land.
  const int64_t *top = rec.items.data_ptr<int64_t>();
  std::cout << "user 42: first pick " << top[0];
  if (device.is_cuda())
    torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised above when the copies were asynchronous.
  std::cout << " best score " << rec.scores[0].item<float>() << '\n';
  return 0;
}
