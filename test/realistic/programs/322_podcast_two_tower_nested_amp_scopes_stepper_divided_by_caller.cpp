// Candidate retrieval for a podcast app: a two-tower model (user tower: mean
// EmbeddingBag over the listening history plus request context; item tower:
// episode and show embeddings), trained with a logQ-corrected in-batch softmax
// in CUDA autocast (float16) through the project's AmpScope, which restores
// the state it found. New episodes warm up the item tower with an accumulating
// stepper, the catalogue is embedded shard by shard into the serving index,
// and a click reranker is fitted on the frozen towers. LibTorch 1.13 and 2.x.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define REC_AMP_SET(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define REC_AMP_ENABLED() at::autocast::is_autocast_enabled(at::kCUDA)
#else
#define REC_AMP_SET(on) at::autocast::set_enabled(on)
#define REC_AMP_ENABLED() at::autocast::is_enabled()
#endif

constexpr int64_t kEpisodes = 5000, kShows = 400, kCtx = 8, kDim = 64, kHist = 20;

struct RecConfig {
  double lr = 1e-3, temperature = 0.05, loss_scale = 1024.0;
  int64_t accum_steps = 4, rerank_accum = 8;  // batches per step: cold start, reranker
};

// Switches CUDA autocast on and restores the state it found.
class AmpScope {
 public:
  AmpScope() : was_on_(REC_AMP_ENABLED()) { REC_AMP_SET(true); }
  ~AmpScope() { REC_AMP_SET(was_on_); }
 private:
  bool was_on_;
};

struct UserTowerImpl : nn::Module {
  UserTowerImpl()
      : history(register_module("history", nn::EmbeddingBag(nn::EmbeddingBagOptions(kEpisodes, 64).mode(torch::kMean)))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(64 + kCtx, 128), nn::ReLU(), nn::Dropout(0.2), nn::Linear(128, kDim)))) {}
  torch::Tensor forward(const torch::Tensor& hist, const torch::Tensor& ctx) {
    return F::normalize(mlp->forward(torch::cat({history->forward(hist), ctx}, 1)), F::NormalizeFuncOptions().dim(1));
  }
  nn::EmbeddingBag history;
  nn::Sequential mlp;
};
TORCH_MODULE(UserTower);

struct ItemTowerImpl : nn::Module {
  ItemTowerImpl()
      : episode(register_module("episode", nn::Embedding(kEpisodes, 64))),
        show(register_module("show", nn::Embedding(kShows, 32))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(96, 128), nn::ReLU(), nn::Dropout(0.2), nn::Linear(128, kDim)))) {}
  torch::Tensor forward(const torch::Tensor& ep, const torch::Tensor& sh) {
    return F::normalize(mlp->forward(torch::cat({episode->forward(ep), show->forward(sh)}, 1)), F::NormalizeFuncOptions().dim(1));
  }
  nn::Embedding episode, show;
  nn::Sequential mlp;
};
TORCH_MODULE(ItemTower);

struct Towers {
  UserTower user;
  ItemTower item;
  std::vector<torch::Tensor> parameters() const {
    auto ps = user->parameters();
    for (const auto& p : item->parameters()) ps.push_back(p);
    return ps;
  }
};

struct Interactions { torch::Tensor history, context, episode, show, log_q, clicked; };

torch::Tensor in_batch_softmax(const torch::Tensor& u, const torch::Tensor& v, const torch::Tensor& log_q, double temp) {
  auto logits = torch::matmul(u, v.t()) / temp - log_q.unsqueeze(0);
  auto labels = torch::arange(u.size(0), torch::TensorOptions().dtype(torch::kLong).device(u.device()));
  return F::cross_entropy(logits, labels);
}

void train_retrieval(Towers& t, const std::vector<Interactions>& data, const RecConfig& cfg) {
  t.user->train();
  t.item->train();
  torch::optim::Adam opt(t.parameters(), torch::optim::AdamOptions(cfg.lr));
  for (const auto& b : data) {
    opt.zero_grad();
    AmpScope step_amp;  // added later: "the whole step in mixed precision"
    torch::Tensor loss;
    {
      AmpScope tower_amp;  // the towers' own scope, shared with the serving path
      loss = in_batch_softmax(t.user->forward(b.history, b.context), t.item->forward(b.episode, b.show), b.log_q, cfg.temperature);
    }
    // BUG(torch-autocast-region): tower_amp restored the state it found, and
    // step_amp had switched it on: backward() runs inside the region.
    (loss * cfg.loss_scale).backward();
    for (auto& p : t.parameters())
      if (p.grad().defined()) p.grad().div_(cfg.loss_scale);
    opt.step();
  }
}

// Steps once every cfg.accum_steps pushed losses.
class AccumulatingStepper {
 public:
  AccumulatingStepper(const std::vector<torch::Tensor>& params, const RecConfig& cfg)
      : opt_(params, torch::optim::SGDOptions(cfg.lr).momentum(0.9)), every_(cfg.accum_steps) {
    opt_.zero_grad();
  }
  void push(const torch::Tensor& loss) {
    // OK(torch-grad-accumulation-unscaled): its only caller divides the loss
    // by cfg.accum_steps before pushing it.
    loss.backward();
    if (++pending_ == every_) {
      opt_.step();
      opt_.zero_grad();
      pending_ = 0;
    }
  }
 private:
  torch::optim::SGD opt_;
  int64_t every_;
  int64_t pending_ = 0;
};

// New episodes have no plays yet: warm up the item tower in float32.
void cold_start(Towers& t, const std::vector<Interactions>& fresh, const RecConfig& cfg) {
  t.user->eval();
  t.item->train();
  AccumulatingStepper stepper(t.item->parameters(), cfg);
  for (const auto& b : fresh) {
    torch::Tensor u;
    {
      torch::NoGradGuard frozen_user;
      u = t.user->forward(b.history, b.context);
    }
    auto loss = in_batch_softmax(u, t.item->forward(b.episode, b.show), b.log_q, cfg.temperature);
    stepper.push(loss / static_cast<double>(cfg.accum_steps));
  }
}

class CatalogShard {
 public:
  CatalogShard(torch::Tensor e, torch::Tensor s) : episodes_(std::move(e)), shows_(std::move(s)) {}
  void check() const {
    if (episodes_.size(0) != shows_.size(0))
      throw std::runtime_error("catalogue shard: episode and show columns differ in length");
  }
  const torch::Tensor& episodes() const { return episodes_; }
  const torch::Tensor& shows() const { return shows_; }
 private:
  torch::Tensor episodes_, shows_;
};

torch::Tensor build_index(ItemTower& tower, const std::vector<CatalogShard>& shards) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  const bool was_on = REC_AMP_ENABLED();
  // BUG(torch-autocast-region): shard.check() throws on a corrupt shard and
  // leaves the indexer's thread in autocast.
  REC_AMP_SET(true);
  for (const auto& shard : shards) {
    shard.check();
    // BUG(torch-eval-mode-missing): cold_start() left the item tower in
    // training mode; its Dropout thins the index embeddings.
    auto emb = tower->forward(shard.episodes(), shard.shows());
    // OK(torch-loss-accumulation-graph): computed under the no-grad guard.
    parts.push_back(emb.to(torch::kFloat));
  }
  REC_AMP_SET(was_on);
  return torch::cat(parts);
}

struct RerankHead {
  nn::Sequential mlp{nn::Linear(2 * kDim + kCtx, 64), nn::ReLU(), nn::Linear(64, 1)};
  nn::BCEWithLogitsLoss criterion;
};

void finetune_reranker(RerankHead& head, Towers& t, const std::vector<Interactions>& clicks, const RecConfig& cfg) {
  t.user->eval();
  t.item->eval();
  head.mlp->train();
  torch::optim::Adam opt(head.mlp->parameters(), torch::optim::AdamOptions(1e-3));
  opt.zero_grad();
  int64_t in_window = 0;
  for (const auto& b : clicks) {
    torch::Tensor u, v;
    {
      torch::NoGradGuard frozen;
      u = t.user->forward(b.history, b.context), v = t.item->forward(b.episode, b.show);
    }
    auto loss = head.criterion(head.mlp->forward(torch::cat({u, v, b.context}, 1)).squeeze(1), b.clicked);
    // BUG(torch-grad-accumulation-unscaled): cfg.rerank_accum click batches
    // add up before each step; the mean BCE is not divided by it.
    loss.backward();
    if (++in_window == cfg.rerank_accum) {
      opt.step();
      opt.zero_grad();
      in_window = 0;
    }
  }
}

torch::Tensor from_request(const std::vector<float>& values) { return torch::tensor(values).view({1, -1}); }

torch::Tensor upload(const torch::Tensor& host, torch::Device device) { return host.to(device, /*non_blocking=*/true); }

torch::Tensor recommend(Towers& t, const torch::Tensor& index, const std::vector<int64_t>& plays,
                        const std::vector<float>& context, torch::Device device) {
  torch::NoGradGuard no_grad;
  AmpScope amp;
  // OK(torch-autocast-region): the scope restores autocast on this return.
  if (plays.empty())
    return torch::Tensor();
  auto hist = torch::tensor(plays).view({1, -1});
  if (device.is_cuda())
    hist = hist.pin_memory();
  // OK(torch-non-blocking-pageable): pinned whenever the copy goes to CUDA.
  auto hist_dev = upload(hist, device);
  // BUG(torch-non-blocking-pageable): from_request() builds a pageable tensor.
  auto ctx_dev = upload(from_request(context), device);
  auto u = t.user->forward(hist_dev, ctx_dev).to(torch::kFloat);
  return std::get<1>(torch::matmul(index, u.t()).squeeze(1).topk(10));
}

std::vector<Interactions> synth_interactions(int64_t n, int64_t batch, torch::Device device) {
  auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
  std::vector<Interactions> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back({torch::randint(kEpisodes, {batch, kHist}, longs), torch::randn({batch, kCtx}, device),
                   torch::randint(kEpisodes, {batch}, longs), torch::randint(kShows, {batch}, longs),
                   torch::rand({batch}, device).log(), (torch::rand({batch}, device) < 0.1).to(torch::kFloat)});
  return out;
}

int main() {
  torch::manual_seed(322);
  const RecConfig cfg;
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Towers towers{UserTower(), ItemTower()};
  towers.user->to(device);
  towers.item->to(device);

  train_retrieval(towers, synth_interactions(64, 128, device), cfg);
  cold_start(towers, synth_interactions(16, 64, device), cfg);

  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
  std::vector<CatalogShard> shards;
  for (int64_t s = 0; s < 4; ++s)
    shards.emplace_back(torch::arange(s * 1000, (s + 1) * 1000, longs), torch::randint(kShows, {1000}, longs));
  auto index = build_index(towers.item, shards);

  RerankHead head;
  head.mlp->to(device);
  finetune_reranker(head, towers, synth_interactions(32, 64, device), cfg);

  auto top = recommend(towers, index, {12, 480, 77, 3051}, std::vector<float>(kCtx, 0.5f), device);
  std::cout << "index " << index.sizes() << ", top-10 " << top << '\n';
}
