// Knowledge tracing for an online maths tutor: predicts whether a student
// answers the next exercise correctly from their answer history (ASSISTments
// style, 110 skills). Two model families (DKT's LSTM and SAKT's causal
// self-attention) share one trainer template; the trainer picks its update
// rule through a pointer to member function (plain or accumulated), early
// stopping is an exception thrown from the epoch hook, and the device comes
// from a function-local static.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kSkills = 110, kSeqLen = 100;

const torch::Device& runtime_device() {
  static const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  return device;
}

// (interactions [B, L-1], next skills [B, L-1], next correctness [B, L-1], mask [B, L-1])
using KtBatch = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor>;

struct DktImpl : nn::Module {
  explicit DktImpl(int64_t hidden)
      : emb(register_module("emb", nn::Embedding(2 * kSkills, hidden))),
        lstm(register_module("lstm", nn::LSTM(nn::LSTMOptions(hidden, hidden).batch_first(true)))),
        out(register_module("out", nn::Linear(hidden, kSkills))) {}
  torch::Tensor forward(const torch::Tensor& inter, const torch::Tensor& next_skill) {
    auto h = std::get<0>(lstm->forward(emb(inter)));
    return out(h).gather(2, next_skill.unsqueeze(2)).squeeze(2);
  }
  nn::Embedding emb;
  nn::LSTM lstm;
  nn::Linear out;
};
TORCH_MODULE(Dkt);

struct SaktImpl : nn::Module {
  explicit SaktImpl(int64_t d)
      : inter_emb(register_module("inter_emb", nn::Embedding(2 * kSkills, d))),
        skill_emb(register_module("skill_emb", nn::Embedding(kSkills, d))),
        pos_emb(register_module("pos_emb", nn::Embedding(kSeqLen, d))),
        wq(register_module("wq", nn::Linear(d, d))), wk(register_module("wk", nn::Linear(d, d))),
        wv(register_module("wv", nn::Linear(d, d))), drop(register_module("drop", nn::Dropout(0.2))),
        ffn(register_module("ffn", nn::Sequential(nn::Linear(d, d), nn::ReLU(), nn::Dropout(0.2), nn::Linear(d, 1)))),
        scale_(1.0 / std::sqrt(static_cast<double>(d))),
        // Position t may attend to interactions 0..t only.
        causal_bias_(torch::full({kSeqLen, kSeqLen}, -1e9).triu(1)) {}

  torch::Tensor forward(const torch::Tensor& inter, const torch::Tensor& next_skill) {
    const int64_t len = inter.size(1);
    auto pos = torch::arange(len, inter.options()).unsqueeze(0);
    auto kv = inter_emb(inter) + pos_emb(pos);
    auto q = wq(skill_emb(next_skill));
    auto scores = torch::matmul(q, wk(kv).transpose(1, 2)) * scale_;
    // BUG(torch-device-mismatch): causal_bias_ is a plain member, not a
    // registered buffer, so to(device) left it on the CPU.
    scores = scores + causal_bias_.narrow(0, 0, len).narrow(1, 0, len);
    auto ctx = torch::matmul(drop(torch::softmax(scores, -1)), wv(kv));
    return ffn->forward(ctx + q).squeeze(2);
  }

  nn::Embedding inter_emb, skill_emb, pos_emb;
  nn::Linear wq, wk, wv;
  nn::Dropout drop;
  nn::Sequential ffn;
  double scale_;
  torch::Tensor causal_bias_;
};
TORCH_MODULE(Sakt);

// Training AUC needs host-side ranks; this keeps the scores of an epoch.
struct RunningAuc {
  std::vector<float> scores, labels;
  void update(const torch::Tensor& logits, const torch::Tensor& target, const torch::Tensor& mask) {
    auto keep = mask.to(torch::kBool);
    // BUG(torch-host-sync-in-loop): called from every training step; the
    // scores come back to the host each time.
    auto host = torch::stack({torch::sigmoid(logits.detach()).masked_select(keep),
                              target.masked_select(keep).to(torch::kFloat)})
                    .cpu();
    auto p = host[0].contiguous(), y = host[1].contiguous();
    scores.insert(scores.end(), p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
    labels.insert(labels.end(), y.data_ptr<float>(), y.data_ptr<float>() + y.numel());
  }
  double value_and_reset();
};

double RunningAuc::value_and_reset() {
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double pos = 0, neg = 0, rank_sum = 0;
  for (size_t r = 0; r < order.size(); ++r) {
    if (labels[order[r]] > 0.5f) { pos += 1; rank_sum += static_cast<double>(r + 1); } else { neg += 1; }
  }
  scores.clear();
  labels.clear();
  return (pos > 0 && neg > 0) ? (rank_sum - pos * (pos + 1) / 2) / (pos * neg) : 0.5;
}

struct EarlyStop {
  int64_t epoch;
};

template <typename Model>
class KtTrainer {
 public:
  using StepFn = void (KtTrainer::*)(const KtBatch&);

  KtTrainer(Model model, int64_t accum)
      : model_(std::move(model)), accum_(accum), opt_(model_->parameters(), torch::optim::AdamOptions(1e-3)),
        step_(accum > 1 ? &KtTrainer::accumulated_step : &KtTrainer::plain_step) {}

  void fit(const std::vector<KtBatch>& train, const std::vector<KtBatch>& val, int64_t max_epochs) {
    model_->train();
    try {
      for (int64_t epoch = 0; epoch < max_epochs; ++epoch) {
        for (const auto& b : train)
          (this->*step_)(b);
        on_epoch_end(epoch, val);
      }
    } catch (const EarlyStop& stop) {
      std::cout << "early stop after epoch " << stop.epoch << '\n';
    }
  }

  Model& model() { return model_; }

 private:
  torch::Tensor masked_bce(const KtBatch& b) {
    const auto& [inter, next_skill, next_correct, mask] = b;
    auto logits = model_->forward(inter, next_skill);
    train_auc_.update(logits, next_correct, mask);
    auto keep = mask.to(torch::kBool);
    return F::binary_cross_entropy_with_logits(logits.masked_select(keep),
                                               next_correct.masked_select(keep).to(torch::kFloat));
  }

  void plain_step(const KtBatch& b) {
    opt_.zero_grad();
    auto loss = masked_bce(b);
    loss.backward();
    opt_.step();
  }

  void accumulated_step(const KtBatch& b) {
    auto loss = masked_bce(b);
    // BUG(torch-grad-accumulation-unscaled): the mean over answered steps is
    // summed over accum_ batches per step and never divided by accum_.
    loss.backward();
    if (++micro_ % accum_ == 0) {
      opt_.step();
      opt_.zero_grad();
    }
  }

  void on_epoch_end(int64_t epoch, const std::vector<KtBatch>& val) {
    const double train_auc = train_auc_.value_and_reset();
    model_->eval();
    {
      torch::NoGradGuard no_grad;
      RunningAuc auc;
      for (const auto& [inter, next_skill, next_correct, mask] : val) {
        // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and a guard.
        auc.update(model_->forward(inter, next_skill), next_correct, mask);
      }
      val_auc_ = auc.value_and_reset();
    }
    model_->train();
    std::cout << "epoch " << epoch << " train AUC " << train_auc << " val AUC " << val_auc_ << '\n';
    if (val_auc_ > best_ + 1e-3) {
      best_ = val_auc_;
      bad_epochs_ = 0;
    } else if (++bad_epochs_ >= 3) {
      throw EarlyStop{epoch};
    }
  }

  Model model_;
  int64_t accum_;
  int64_t micro_ = 0;
  torch::optim::Adam opt_;
  StepFn step_;
  RunningAuc train_auc_;
  double val_auc_ = 0.0, best_ = 0.0;
  int64_t bad_epochs_ = 0;
};

std::vector<KtBatch> synth_students(int64_t batches, int64_t n) {
  const auto& device = runtime_device();
  std::vector<KtBatch> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto skill = torch::randint(kSkills, {n, kSeqLen}, torch::kLong);
    auto correct = (torch::rand({n, kSeqLen}) < 0.6).to(torch::kLong);
    auto lengths = torch::randint(10, kSeqLen, {n, 1}, torch::kLong);
    auto mask = (torch::arange(1, kSeqLen).unsqueeze(0) < lengths).to(torch::kFloat);
    auto inter = (skill + kSkills * correct).narrow(1, 0, kSeqLen - 1);
    out.emplace_back(inter.to(device), skill.narrow(1, 1, kSeqLen - 1).to(device),
                     correct.narrow(1, 1, kSeqLen - 1).to(device), mask.to(device));
  }
  return out;
}

// The tutor app asks for one student's chance on each candidate exercise.
template <typename Model>
torch::Tensor next_exercise_scores(Model& model, const torch::Tensor& history, const torch::Tensor& candidate) {
  c10::InferenceMode guard;
  auto inter = history.unsqueeze(0).expand({candidate.size(0), history.size(0)});
  auto next = candidate.unsqueeze(1).expand({candidate.size(0), history.size(0)});
  // BUG(torch-eval-mode-missing): main() calls this right after fit(), which
  // leaves the SAKT model in train(): its dropout is still on.
  return torch::sigmoid(model->forward(inter, next)).select(1, -1);
}

int main() {
  torch::manual_seed(181);
  const auto& device = runtime_device();
  auto train = synth_students(300, 64), val = synth_students(30, 64);

  Dkt dkt(128);
  dkt->to(device);
  KtTrainer<Dkt> dkt_trainer(dkt, /*accum=*/1);
  dkt_trainer.fit(train, val, 20);

  Sakt sakt(128);
  sakt->to(device);
  KtTrainer<Sakt> sakt_trainer(sakt, /*accum=*/4);
  sakt_trainer.fit(train, val, 20);

  auto history = std::get<0>(val.front())[0].narrow(0, 0, 40);
  auto candidates = torch::arange(kSkills, history.options());
  auto chances = next_exercise_scores(sakt_trainer.model(), history, candidates);
  std::cout << "easiest next skill " << chances.argmax().item<int64_t>() << '\n';
}
