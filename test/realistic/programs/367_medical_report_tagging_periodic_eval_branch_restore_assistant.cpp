// Multi-label tagging of discharge and radiology reports with ICD-10
// chapters: token ids -> mean embedding bag -> MLP with dropout -> 20 sigmoid
// outputs. Validation runs every few epochs with early stopping on micro-F1;
// per-tag thresholds are then tuned on the validation split, the test split is
// scored, and the coding assistant suggests tags for the day's reports. The
// coders' corrections are fed back with small accumulated batches. The
// service runs on the hospital's GPU node.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

namespace medtag {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kVocab = 5000, kTags = 20, kLen = 120;

struct Config {
  int64_t epochs = 30, eval_every = 3, patience = 2, feedback_accum = 4;
  double lr = 2e-3;
  std::string checkpoint = "tagger_best.pt";
};

struct ReportBatch {
  torch::Tensor tokens;  // [B, 120] token ids
  torch::Tensor tags;    // [B, 20] 0/1
};

std::vector<ReportBatch> synth_reports(int64_t batches, int64_t batch_size) {
  std::vector<ReportBatch> out;
  for (int64_t i = 0; i < batches; ++i) {
    auto tokens = torch::randint(0, kVocab, {batch_size, kLen}, torch::kLong);
    // A tag fires when one of its 250 trigger tokens shows up in the report.
    auto hits = torch::zeros({batch_size, kTags});
    for (int64_t t = 0; t < kTags; ++t)
      hits.select(1, t).copy_((tokens.remainder(kTags) == t).sum(1).gt(kLen / kTags + 2).to(torch::kFloat));
    out.push_back({tokens, hits});
  }
  return out;
}

struct TaggerImpl : nn::Module {
  TaggerImpl()
      : bag(register_module("bag", nn::EmbeddingBag(nn::EmbeddingBagOptions(kVocab, 128).mode(torch::kMean)))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(128, 256), nn::ReLU(), nn::Dropout(0.4),
                                                  nn::Linear(256, kTags)))) {}
  torch::Tensor forward(const torch::Tensor &tokens) { return mlp->forward(bag->forward(tokens)); }
  nn::EmbeddingBag bag;
  nn::Sequential mlp;
};
TORCH_MODULE(Tagger);

// Per-step losses of the current epoch, summarised once per epoch.
class History {
 public:
  void record(const torch::Tensor &loss) {
    // BUG(torch-loss-accumulation-graph): train_epoch() hands every step's live loss; the member vector keeps all their graphs until epoch_mean().
    losses_.push_back(loss);
  }
  double epoch_mean() {
    const double mean = torch::stack(losses_).mean().item<double>();
    losses_.clear();
    return mean;
  }

 private:
  std::vector<torch::Tensor> losses_;
};

void train_epoch(Tagger &model, torch::optim::Optimizer &opt, const std::vector<ReportBatch> &batches,
                 History &history, torch::Device device) {
  model->train();
  for (const auto &b : batches) {
    opt.zero_grad();
    // OK(torch-eval-mode-missing): train() at the top of every epoch undoes the periodic eval().
    auto loss = F::binary_cross_entropy_with_logits(model->forward(b.tokens.to(device)), b.tags.to(device));
    loss.backward();
    opt.step();
    history.record(loss);
  }
}

double micro_f1(Tagger &model, const std::vector<ReportBatch> &split, const torch::Tensor &thresholds,
                torch::Device device) {
  torch::NoGradGuard no_grad;
  double tp = 0, fp = 0, fn = 0;
  for (const auto &b : split) {
    // OK(torch-eval-mode-missing): both callers switch the tagger to eval() right before.
    auto pred = torch::sigmoid(model->forward(b.tokens.to(device))).gt(thresholds).to(torch::kFloat);
    auto gold = b.tags.to(device);
    tp += (pred * gold).sum().item<double>();
    fp += (pred * (1 - gold)).sum().item<double>();
    fn += ((1 - pred) * gold).sum().item<double>();
  }
  return 2 * tp / (2 * tp + fp + fn + 1e-8);
}

// Per-tag cut-off maximising that tag's F1 on the validation split.
torch::Tensor tune_thresholds(Tagger &model, const std::vector<ReportBatch> &val, torch::Device device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> probs, gold;
  for (const auto &b : val) {
    // BUG(torch-eval-mode-missing): the loop only restores train() on the improving branch, so a last validation that improved leaves the tagger training here.
    probs.push_back(torch::sigmoid(model->forward(b.tokens.to(device))));
    gold.push_back(b.tags.to(device));
  }
  auto p = torch::cat(probs), t = torch::cat(gold);
  auto best = torch::full({kTags}, 0.5, p.options());
  auto best_f1 = torch::zeros({kTags}, p.options());
  for (double cut = 0.1; cut < 0.91; cut += 0.05) {
    auto pred = p.gt(cut).to(torch::kFloat);
    auto tp = (pred * t).sum(0), fp = (pred * (1 - t)).sum(0), fn = ((1 - pred) * t).sum(0);
    auto f1 = 2 * tp / (2 * tp + fp + fn + 1e-8);
    auto better = f1.gt(best_f1);
    best = torch::where(better, torch::full_like(best, cut), best);
    best_f1 = torch::where(better, f1, best_f1);
  }
  return best;
}

// Suggests tags for one report at a time, as the coder opens it.
class CodingAssistant {
 public:
  CodingAssistant(Tagger model, torch::Tensor thresholds, torch::Device device)
      : model_(std::move(model)), thresholds_(std::move(thresholds)), device_(device) {
    model_->eval();
  }
  std::vector<int64_t> suggest(const torch::Tensor &tokens) {
    // BUG(torch-inference-without-no-grad): main calls suggest() for every report of the day without a guard; nothing here runs backward.
    // OK(torch-eval-mode-missing): the constructor switched the model to eval().
    auto probs = torch::sigmoid(model_->forward(tokens.unsqueeze(0).to(device_))).squeeze(0);
    auto idx = probs.gt(thresholds_).nonzero().squeeze(1).cpu();
    return std::vector<int64_t>(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel());
  }

 private:
  Tagger model_;
  torch::Tensor thresholds_;
  torch::Device device_;
};

// Coders' corrections arrive a few reports at a time; four of them make one update.
void apply_feedback(Tagger &model, torch::optim::Optimizer &opt, const std::vector<ReportBatch> &corrections,
                    int64_t accum, torch::Device device) {
  model->train();
  opt.zero_grad();
  int64_t seen = 0;
  for (const auto &b : corrections) {
    auto loss = F::binary_cross_entropy_with_logits(model->forward(b.tokens.to(device)), b.tags.to(device));
    // BUG(torch-grad-accumulation-unscaled): the mean loss is not divided by accum, so each update is four times too large.
    loss.backward();
    if (++seen % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

}  // namespace medtag

int main() {
  using namespace medtag;
  torch::manual_seed(367);
  Config cfg;
  // BUG(torch-cuda-unguarded): the service assumes the GPU node; no is_available() check and no CPU fallback.
  const torch::Device device(torch::kCUDA);

  const auto train = synth_reports(20, 64), val = synth_reports(5, 128), test = synth_reports(5, 128);
  Tagger model;
  model->to(device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(cfg.lr));
  History history;
  const auto default_cut = torch::full({kTags}, 0.5, torch::TensorOptions().device(device));

  double best_f1 = 0.0;
  int64_t stale = 0;
  for (int64_t epoch = 1; epoch <= cfg.epochs; ++epoch) {
    train_epoch(model, opt, train, history, device);
    std::cout << "epoch " << epoch << " loss " << history.epoch_mean() << '\n';
    if (epoch % cfg.eval_every == 0) {
      model->eval();
      const double f1 = micro_f1(model, val, default_cut, device);
      std::cout << "  val micro-F1 " << f1 << '\n';
      if (f1 > best_f1 + 1e-4) {
        best_f1 = f1;
        stale = 0;
        torch::save(model, cfg.checkpoint);
        model->train();
      } else if (++stale >= cfg.patience) {
        std::cout << "  early stop\n";
        break;
      }
    }
  }

  const auto cuts = tune_thresholds(model, val, device);
  model->eval();
  std::cout << "test micro-F1 " << micro_f1(model, test, cuts, device) << '\n';

  CodingAssistant assistant(model, cuts, device);
  const auto todays = synth_reports(1, 12).front().tokens;
  for (int64_t r = 0; r < todays.size(0); ++r) {
    const auto tags = assistant.suggest(todays[r]);
    std::cout << "report " << r << ": " << tags.size() << " suggested chapters\n";
  }

  apply_feedback(model, opt, synth_reports(8, 4), cfg.feedback_accum, device);
  torch::save(model, cfg.checkpoint);
  return 0;
}
