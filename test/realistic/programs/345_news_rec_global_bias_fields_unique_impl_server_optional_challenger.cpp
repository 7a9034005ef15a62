// News recommendation (NRMS-style): a title encoder with dropout embeds each
// article, an attention pooler turns the click history into a user vector, and
// candidates are scored by a dot product with a display-slot bias. Training
// accumulates micro-batches of impressions; the curve of losses is reported
// through a hook. The nightly checkpoint is served by a unique_ptr-owned model
// next to yesterday's model as an optional shadow challenger.
// LibTorch 1.13 and 2.x.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kVocab = 30000, kTitle = 16, kHist = 24, kCands = 5, kDim = 96;

// Ranking constants shared by training and serving.
struct RankingConfig {
  torch::Tensor slot_bias;  // [1, kCands]: click propensity of each display slot
  double lr = 5e-4;
  int64_t accum = 4;
  std::string checkpoint = "/tmp/nrms_nightly.pt";
  std::string yesterday;  // empty: no challenger tonight
};
RankingConfig g_rank;

struct NewsEncoderImpl : nn::Module {
  NewsEncoderImpl()
      : emb(register_module("emb", nn::Embedding(kVocab, 128))),
        drop(register_module("drop", nn::Dropout(0.2))),
        proj(register_module("proj", nn::Linear(128, kDim))) {}
  torch::Tensor forward(const torch::Tensor &titles) {  // [..., kTitle]
    return torch::tanh(proj->forward(drop->forward(emb->forward(titles).mean(-2))));
  }
  nn::Embedding emb;
  nn::Dropout drop;
  nn::Linear proj;
};
TORCH_MODULE(NewsEncoder);

struct NewsRecImpl : nn::Module {
  NewsRecImpl()
      : news(register_module("news", NewsEncoder())), attn(register_module("attn", nn::Linear(kDim, 1))) {}
  // history [B, H, T], candidates [B, C, T] -> scores [B, C]
  torch::Tensor forward(const torch::Tensor &history, const torch::Tensor &candidates) {
    auto h = news->forward(history);
    auto w = torch::softmax(attn->forward(h), 1);
    auto user = (w * h).sum(1);
    return torch::bmm(news->forward(candidates), user.unsqueeze(2)).squeeze(2);
  }
  NewsEncoder news;
  nn::Linear attn;
};
TORCH_MODULE(NewsRec);

struct Impressions {
  torch::Tensor history, candidates, clicked_slot;
};

std::vector<Impressions> synth_impressions(int64_t batches, int64_t n, torch::Device device) {
  auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  std::vector<Impressions> out;
  for (int64_t i = 0; i < batches; ++i)
    out.push_back({torch::randint(kVocab, {n, kHist, kTitle}, ids), torch::randint(kVocab, {n, kCands, kTitle}, ids),
                   torch::randint(kCands, {n}, ids)});
  return out;
}

struct TrainHooks {
  std::function<void(int64_t, const torch::Tensor &)> on_loss;
};

class ImpressionTrainer {
 public:
  ImpressionTrainer(NewsRec model, TrainHooks hooks)
      : model_(std::move(model)), hooks_(std::move(hooks)),
        opt_(model_->parameters(), torch::optim::AdamOptions(g_rank.lr)) {}

  void train_step(const Impressions &b) {
    // OK(torch-device-mismatch): main() moved g_rank.slot_bias to the
    // model's device before training.
    auto logits = model_->forward(b.history, b.candidates) + g_rank.slot_bias;
    auto loss = F::cross_entropy(logits, b.clicked_slot);
    // BUG(torch-grad-accumulation-unscaled): g_rank.accum micro-batches add
    // their gradients before each step; the mean loss is not divided by it.
    loss.backward();
    hooks_.on_loss(steps_++, loss);
    if (++micro_ == g_rank.accum) {
      // OK(torch-missing-zero-grad): reset right after the step, under the
      // same counter.
      opt_.step();
      opt_.zero_grad();
      micro_ = 0;
    }
    last_loss_ = loss.detach();
  }
  const torch::Tensor &last_loss() const { return last_loss_; }

 private:
  NewsRec model_;
  TrainHooks hooks_;
  torch::optim::Adam opt_;
  int64_t micro_ = 0, steps_ = 0;
  torch::Tensor last_loss_;
};

double hit_at_1(NewsRec &model, const std::vector<Impressions> &val) {
  model->eval();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> hits;
  for (const auto &b : val) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval()
    // and the guard above.
    auto scores = model->forward(b.history, b.candidates) + g_rank.slot_bias;
    // OK(torch-loss-accumulation-graph): computed under the no-grad guard.
    hits.push_back((scores.argmax(1) == b.clicked_slot).to(torch::kFloat));
  }
  model->train();
  return torch::cat(hits).mean().item<double>();
}

// Today's candidate articles, tokenised on the host by the ingest job.
class CandidatePool {
 public:
  explicit CandidatePool(int64_t n) : titles_(torch::randint(kVocab, {n, kTitle}, torch::kLong)) {}
  const torch::Tensor &titles() const { return titles_; }
  int64_t size() const { return titles_.size(0); }

 private:
  torch::Tensor titles_;
};

torch::Tensor load_history(int64_t user_id, torch::Device device) {
  torch::manual_seed(static_cast<uint64_t>(user_id));
  auto opts = torch::TensorOptions().dtype(torch::kLong).pinned_memory(device.is_cuda());
  auto host = torch::randint(kVocab, {1, kHist, kTitle}, opts);
  // OK(torch-non-blocking-pageable): pinned whenever the destination is CUDA.
  return host.to(device, /*non_blocking=*/true);
}

void serve(const CandidatePool &pool, const std::vector<int64_t> &users, torch::Device device) {
  auto model = std::make_unique<NewsRecImpl>();
  {
    torch::serialize::InputArchive ar;
    ar.load_from(g_rank.checkpoint);
    model->load(ar);
  }
  // OK(torch-tensor-to-discarded): Module::to moves the parameters in place.
  model->to(device);
  model->eval();

  std::optional<NewsRec> challenger;
  if (!g_rank.yesterday.empty()) {
    challenger.emplace();
    torch::load(*challenger, g_rank.yesterday);
    (*challenger)->to(device);
    (*challenger)->eval();
  }

  c10::InferenceMode inference;
  // BUG(torch-non-blocking-pageable): the pool's titles were made by
  // torch::randint on the host, never pinned.
  auto cands = pool.titles().to(device, /*non_blocking=*/true).unsqueeze(0);
  for (int64_t user : users) {
    auto history = load_history(user, device);
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): the
    // unique_ptr's module was switched to eval() after loading; inference
    // mode is on.
    auto scores = model->forward(history, cands).squeeze(0);
    if (challenger) {
      // OK(torch-eval-mode-missing): emplaced, loaded and eval()'d above.
      auto shadow = (*challenger)->forward(history, cands).squeeze(0);
      std::cout << "user " << user << " shadow agreement "
                << (shadow.argmax() == scores.argmax()).item<bool>() << '\n';
    }
    auto top = std::get<1>(scores.topk(std::min<int64_t>(10, pool.size())));
    auto top_host = top.to(torch::kCPU, /*non_blocking=*/true);
    if (device.is_cuda())
      torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised after the copy.
    std::cout << "user " << user << " top " << top_host << '\n';
  }
}

torch::Device pick_device() {
  if (!torch::cuda::is_available())
    return torch::Device(torch::kCPU);
  // OK(torch-cuda-unguarded): returned only after the availability check.
  return torch::Device(torch::kCUDA);
}

int main() {
  torch::manual_seed(345);
  const torch::Device device = pick_device();
  g_rank.slot_bias = torch::linspace(0.3, 0.0, kCands).view({1, kCands});
  g_rank.slot_bias = g_rank.slot_bias.to(device);

  NewsRec model;
  model->to(device);
  std::vector<torch::Tensor> curve;
  TrainHooks hooks;
  hooks.on_loss = [&curve](int64_t, const torch::Tensor &loss) {
    // BUG(torch-loss-accumulation-graph): the curve keeps every step's loss
    // with its graph until the end of training.
    curve.push_back(loss);
  };
  ImpressionTrainer trainer(model, hooks);

  auto train = synth_impressions(48, 32, device), val = synth_impressions(8, 64, device);
  for (int epoch = 0; epoch < 2; ++epoch) {
    int64_t step = 0;
    for (const auto &b : train) {
      trainer.train_step(b);
      // OK(torch-host-sync-in-loop): read every 100 steps only.
      if (++step % 100 == 0)
        std::cout << "step " << step << " loss " << trainer.last_loss().item<float>() << '\n';
    }
    std::cout << "epoch " << epoch << " hit@1 " << hit_at_1(model, val) << '\n';
  }
  std::cout << "final loss " << curve.back().item<float>() << " over " << curve.size() << " steps\n";

  {
    torch::serialize::OutputArchive ar;
    model->save(ar);
    ar.save_to(g_rank.checkpoint);
  }
  serve(CandidatePool(200), {7, 42, 1001}, device);
}
