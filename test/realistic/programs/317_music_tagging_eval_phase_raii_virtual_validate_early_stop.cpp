// Music auto-tagging: 50 tags (genre, mood, instrument) from 96-band log-mel
// patches of 128 frames. A short-chunk CNN is trained with binary cross
// entropy; the experiment compares two early-stopping criteria, each a
// subclass of TaggerTrainer overriding validate(): precision@5 of the tags
// and validation loss. An EvalPhase object switches a model to eval() for a
// scope and puts it back into training in its destructor. The winner tags
// the test split and then the whole catalogue.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace tagging {

constexpr int64_t kMels = 96, kFrames = 128, kTags = 50;

struct Clip {
  torch::Tensor mel;   // [B, 1, 96, 128]
  torch::Tensor tags;  // [B, 50] multi-hot
};

std::vector<Clip> synth_clips(int64_t batches, int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<Clip> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto tags = torch::rand({n, kTags}).lt(0.08).to(torch::kFloat);
    // Each tag lights up its own mel band.
    auto bands = F::interpolate(tags.view({n, 1, kTags, 1}),
                                F::InterpolateFuncOptions().size(std::vector<int64_t>{kMels, kFrames}).mode(torch::kNearest));
    out.push_back({bands + 0.3 * torch::randn({n, 1, kMels, kFrames}), tags});
  }
  return out;
}

nn::Sequential conv_bn(int64_t in, int64_t out) {
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1)), nn::BatchNorm2d(out), nn::ReLU(),
                        nn::MaxPool2d(nn::MaxPool2dOptions(2)));
}

struct ShortChunkCnnImpl : nn::Module {
  ShortChunkCnnImpl()
      : block1(register_module("block1", conv_bn(1, 32))),
        block2(register_module("block2", conv_bn(32, 64))),
        block3(register_module("block3", conv_bn(64, 64))),
        classifier(register_module("classifier", nn::Sequential(nn::Linear(64, 128), nn::ReLU(), nn::Dropout(0.5),
                                                                nn::Linear(128, kTags)))) {}
  torch::Tensor forward(const torch::Tensor &mel) {
    auto h = block3->forward(block2->forward(block1->forward(mel)));
    return classifier->forward(std::get<0>(h.flatten(2).max(2)));  // max over time-frequency
  }
  nn::Sequential block1, block2, block3, classifier;
};
TORCH_MODULE(ShortChunkCnn);

// Fraction of the five highest-scored tags that are true tags.
torch::Tensor precision_at_5(const torch::Tensor &logits, const torch::Tensor &tags) {
  auto top = std::get<1>(logits.topk(5, 1));
  return tags.gather(1, top).mean();
}

}  // namespace tagging

using tagging::Clip;
using tagging::ShortChunkCnn;

// Evaluation mode for the lifetime of the object; training mode afterwards.
class EvalPhase {
 public:
  explicit EvalPhase(ShortChunkCnn model) : model_(std::move(model)) { model_->eval(); }
  ~EvalPhase() { model_->train(); }
  EvalPhase(const EvalPhase &) = delete;
  EvalPhase &operator=(const EvalPhase &) = delete;

 private:
  ShortChunkCnn model_;
};

struct RunningStats {
  torch::Tensor loss_sum;
  int64_t steps = 0;
};

class TaggerTrainer {
 public:
  TaggerTrainer(ShortChunkCnn model, torch::Device device, int patience)
      : model_(std::move(model)), device_(device), opt_(model_->parameters(), torch::optim::AdamOptions(1e-3)),
        patience_(patience) {
    model_->to(device_);
  }
  virtual ~TaggerTrainer() = default;

  // Trains until validate() has not improved for `patience_` epochs.
  double fit(const std::vector<Clip> &train, const std::vector<Clip> &val, int max_epochs) {
    double best = -1e9;
    int since_best = 0;
    for (int epoch = 0; epoch < max_epochs && since_best < patience_; ++epoch) {
      train_epoch(train);
      const double score = validate(val);
      std::cout << name() << " epoch " << epoch << " score " << score << '\n';
      if (score > best) {
        best = score;
        since_best = 0;
      } else {
        ++since_best;
      }
    }
    return best;
  }

 protected:
  virtual const char *name() const = 0;
  virtual double validate(const std::vector<Clip> &val) = 0;

  void train_epoch(const std::vector<Clip> &data) {
    stats_ = {torch::zeros({}, torch::TensorOptions().device(device_)), 0};
    for (const auto &clip : data) {
      // BUG(torch-non-blocking-pageable): synth_clips() made the mel patches
      // in pageable host memory; the copy to `device_` is synchronous anyway.
      auto mel = clip.mel.to(device_, /*non_blocking=*/true);
      auto tags = clip.tags.to(device_);
      opt_.zero_grad();
      // OK(torch-eval-mode-missing): every validate() leaves the model in training mode.
      auto loss = F::binary_cross_entropy_with_logits(model_->forward(mel), tags);
      loss.backward();
      opt_.step();
      // BUG(torch-loss-accumulation-graph): the member's running sum keeps
      // every step's graph alive until the next epoch resets it.
      stats_.loss_sum += loss;
      if (++stats_.steps % 50 == 0)
        // OK(torch-host-sync-in-loop): one read every 50 steps.
        std::cout << "  step " << stats_.steps << " loss " << loss.item<float>() << '\n';
    }
  }

  ShortChunkCnn model_;
  torch::Device device_;
  torch::optim::Adam opt_;
  RunningStats stats_;
  int patience_;
};

class PrecisionTrainer : public TaggerTrainer {
 public:
  using TaggerTrainer::TaggerTrainer;

 protected:
  const char *name() const override { return "p@5"; }
  double validate(const std::vector<Clip> &val) override {
    EvalPhase phase(model_);
    auto hits = torch::zeros({}, torch::TensorOptions().device(device_));
    for (const auto &clip : val) {
      // OK(torch-eval-mode-missing): the EvalPhase of this scope called eval().
      // BUG(torch-inference-without-no-grad): EvalPhase only switches the
      // mode; autograd still records this whole validation loop.
      auto logits = model_->forward(clip.mel.to(device_));
      // OK(torch-loss-accumulation-graph): topk indices and tag gathers carry no graph.
      hits += tagging::precision_at_5(logits, clip.tags.to(device_));
    }
    return hits.item<double>() / static_cast<double>(val.size());
  }
};

class LossTrainer : public TaggerTrainer {
 public:
  using TaggerTrainer::TaggerTrainer;

 protected:
  const char *name() const override { return "bce"; }
  double validate(const std::vector<Clip> &val) override {
    torch::NoGradGuard no_grad;
    auto total = torch::zeros({}, torch::TensorOptions().device(device_));
    for (const auto &clip : val)
      // BUG(torch-eval-mode-missing): train_epoch() left model_ in training
      // mode and this override never calls eval(): dropout 0.5 on the scores.
      total += F::binary_cross_entropy_with_logits(model_->forward(clip.mel.to(device_)), clip.tags.to(device_));
    return -total.item<double>() / static_cast<double>(val.size());
  }
};

double test_precision(ShortChunkCnn &model, const std::vector<Clip> &test, const torch::Device &device) {
  torch::NoGradGuard no_grad;
  double sum = 0.0;
  for (const auto &clip : test)
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): the caller's EvalPhase, this guard.
    sum += tagging::precision_at_5(model->forward(clip.mel.to(device)), clip.tags.to(device)).item<double>();
  return sum / static_cast<double>(test.size());
}

int main() {
  torch::manual_seed(317);
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  const auto train = tagging::synth_clips(40, 16, 1);
  const auto val = tagging::synth_clips(6, 32, 2);
  const auto test = tagging::synth_clips(6, 32, 3);
  const auto catalogue = tagging::synth_clips(10, 64, 4);

  ShortChunkCnn by_precision, by_loss;
  PrecisionTrainer precision_trainer(by_precision, device, 2);
  LossTrainer loss_trainer(by_loss, device, 2);
  const double best_p5 = precision_trainer.fit(train, val, 12);
  const double best_bce = loss_trainer.fit(train, val, 12);
  std::cout << "best val p@5 " << best_p5 << ", best val -bce " << best_bce << '\n';

  ShortChunkCnn model = by_precision;
  double p5 = 0.0;
  {
    EvalPhase phase(model);
    p5 = test_precision(model, test, device);
  }
  std::cout << "test p@5 " << p5 << '\n';

  torch::NoGradGuard no_grad;
  std::vector<int64_t> tag_counts(tagging::kTags, 0);
  for (const auto &clip : catalogue) {
    // BUG(torch-eval-mode-missing): the EvalPhase ended with the block above
    // and its destructor called train(): the catalogue is tagged with dropout.
    auto probs = torch::sigmoid(model->forward(clip.mel.to(device)));
    auto counts = probs.gt(0.5).sum(0).to(torch::kCPU);
    for (int64_t t = 0; t < tagging::kTags; ++t)
      tag_counts[t] += counts[t].item<int64_t>();
  }
  std::cout << "tag 0 appears on " << tag_counts[0] << " catalogue tracks\n";
}
