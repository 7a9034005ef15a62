// Character-level CTC acoustic model for a call-centre transcription
// pipeline: 80-dim log-mel frames go through a frame encoder built by a
// factory (two Linear/ReLU/Dropout stages) and a classifier over 28
// characters plus the CTC blank. Every runner of the recipe derives from a
// small PhaseRunner base that owns the model handle and switches it between
// training and scoring; the trainer and the sample printer are derived
// classes. Corpus transcription runs on the averaged checkpoint when one
// exists. Utterances are synthesised so the program runs on its own.
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

constexpr int64_t kFeat = 80, kHid = 256, kVocab = 29, kFrames = 120, kMaxLabel = 24, kBatch = 16;
const char *const kAlphabet = "_abcdefghijklmnopqrstuvwxyz '";

torch::nn::Sequential make_frame_encoder(int64_t in, int64_t hid, double drop) {
  return torch::nn::Sequential(torch::nn::Linear(in, hid), torch::nn::ReLU(), torch::nn::Dropout(drop),
                               torch::nn::Linear(hid, hid), torch::nn::ReLU(), torch::nn::Dropout(drop));
}

struct CtcModelImpl : torch::nn::Module {
  CtcModelImpl(int64_t feat, double drop)
      : encoder(register_module("encoder", make_frame_encoder(feat, kHid, drop))),
        classifier(register_module("classifier", torch::nn::Linear(kHid, kVocab))) {}

  // feats [B, T, F] -> log-probabilities [T, B, V], the layout CTC wants
  torch::Tensor forward(const torch::Tensor &feats) {
    return torch::log_softmax(classifier->forward(encoder->forward(feats)), -1).transpose(0, 1);
  }

  torch::nn::Sequential encoder;
  torch::nn::Linear classifier;
};
TORCH_MODULE(CtcModel);

struct Utterances {
  torch::Tensor feats, targets, input_lengths, target_lengths;
};

struct EpochStats {
  torch::Tensor ctc_sum;
  int64_t steps = 0;
};

// Frames whose energy pattern follows the character ids, plus noise.
Utterances synth_batch(int64_t n, std::mt19937 &rng) {
  std::uniform_int_distribution<int64_t> len(8, kMaxLabel), ch(1, kVocab - 1);
  Utterances u;
  u.targets = torch::zeros({n, kMaxLabel}, torch::kLong);
  u.target_lengths = torch::empty({n}, torch::kLong);
  u.input_lengths = torch::full({n}, kFrames, torch::kLong);
  u.feats = 0.3 * torch::randn({n, kFrames, kFeat});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t l = len(rng);
    u.target_lengths[i] = l;
    for (int64_t k = 0; k < l; ++k) {
      const int64_t c = ch(rng);
      u.targets[i][k] = c;
      u.feats[i].narrow(0, k * (kFrames / kMaxLabel), kFrames / kMaxLabel).narrow(1, c * 2, 2).add_(1.5);
    }
  }
  return u;
}

std::string collapse(const torch::Tensor &ids) {
  std::string text;
  int64_t prev = 0;
  auto a = ids.accessor<int64_t, 1>();
  for (int64_t t = 0; t < a.size(0); ++t) {
    if (a[t] != prev && a[t] != 0)
      text.push_back(kAlphabet[a[t]]);
    prev = a[t];
  }
  return text;
}

// Switches the shared model between phases; every runner derives from it.
class PhaseRunner {
 public:
  explicit PhaseRunner(CtcModel model) : model_(std::move(model)) {}

 protected:
  void enter_training() { model_->train(); }
  void enter_scoring() { model_->eval(); }

  CtcModel model_;
};

class CtcTrainer : public PhaseRunner {
 public:
  CtcTrainer(CtcModel model, torch::Device device)
      : PhaseRunner(std::move(model)), device_(device),
        opt_(model_->parameters(), torch::optim::AdamOptions(3e-4)),
        ctc_(torch::nn::CTCLossOptions().blank(0).zero_infinity(true)) {}

  void fit_epoch(int64_t steps, std::mt19937 &rng) {
    enter_training();
    EpochStats stats;
    stats.ctc_sum = torch::zeros({}, torch::TensorOptions().device(device_));
    for (int64_t s = 0; s < steps; ++s) {
      auto b = synth_batch(kBatch, rng);
      // BUG(torch-non-blocking-pageable): synth_batch() builds plain CPU
      // tensors; the flag cannot overlap anything without pinned memory.
      auto feats = b.feats.to(device_, /*non_blocking=*/true);
      // OK(torch-eval-mode-missing): enter_training() above, and the loss
      // reaches backward().
      auto log_probs = model_->forward(feats);
      auto loss = ctc_(log_probs, b.targets.to(device_), b.input_lengths.to(device_), b.target_lengths.to(device_));
      opt_.zero_grad();
      loss.backward();
      opt_.step();
      // BUG(torch-loss-accumulation-graph): the struct field keeps every
      // step's graph alive until the epoch ends.
      stats.ctc_sum += loss;
      ++stats.steps;
    }
    std::cout << "epoch ctc " << (stats.ctc_sum / static_cast<double>(stats.steps)).item<double>() << "\n";
  }

  double validate(const std::vector<Utterances> &dev) {
    enter_scoring();
    torch::NoGradGuard no_grad;
    double total = 0.0;
    for (const auto &b : dev) {
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): the
      // base's enter_scoring() switched the model, and the guard is above.
      auto log_probs = model_->forward(b.feats.to(device_));
      total += ctc_(log_probs, b.targets.to(device_), b.input_lengths.to(device_), b.target_lengths.to(device_))
                   .item<double>();
    }
    enter_training();
    return total / static_cast<double>(dev.size());
  }

  // A few greedy transcripts for the log, next to their references.
  void print_samples(const Utterances &b, int64_t n) {
    torch::NoGradGuard no_grad;
    // BUG(torch-eval-mode-missing): validate() handed the model back through
    // enter_training(); the factory's dropout layers are on while decoding.
    auto best = model_->forward(b.feats.narrow(0, 0, n).to(device_)).argmax(-1).transpose(0, 1).cpu();
    for (int64_t i = 0; i < n; ++i)
      std::cout << "  hyp: " << collapse(best[i]) << "\n";
  }

 private:
  torch::Device device_;
  torch::optim::Adam opt_;
  torch::nn::CTCLoss ctc_;
};

// Loads the averaged checkpoint if there is one and switches to inference.
bool load_for_inference(CtcModel &model, const std::string &path) {
  std::ifstream probe(path);
  if (!probe.good()) {
    std::cerr << "no checkpoint at " << path << ", transcribing with the live weights\n";
    return false;
  }
  torch::load(model, path);
  model->eval();
  return true;
}

std::vector<std::string> transcribe(CtcModel &model, const std::vector<torch::Tensor> &clips, torch::Device device) {
  c10::InferenceMode guard;
  std::vector<std::string> out;
  for (const auto &clip : clips) {
    // BUG(torch-eval-mode-missing): without a checkpoint load_for_inference()
    // returns before eval(), and the model is still in training mode.
    auto ids = model->forward(clip.to(device).unsqueeze(0)).argmax(-1).squeeze(1).cpu();
    out.push_back(collapse(ids));
  }
  return out;
}

// Fraction of frames the model assigns to the blank, a health metric of CTC.
double blank_ratio(CtcModel model, const std::vector<Utterances> &dev, torch::Device device) {
  model->eval();
  auto blank_mask = torch::zeros({kVocab});
  blank_mask[0] = 1.0;
  double ratio = 0.0;
  for (const auto &b : dev) {
    // BUG(torch-inference-without-no-grad): the metric loop never trains,
    // yet autograd records every batch.
    auto probs = model->forward(b.feats.to(device)).exp();
    // BUG(torch-device-mismatch): blank_mask was made on the CPU; the
    // probabilities are on `device`.
    ratio += (probs * blank_mask).sum(-1).mean().item<double>();
  }
  return ratio / static_cast<double>(dev.size());
}

int main() {
  torch::manual_seed(232);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  CtcModel model(kFeat, 0.15);
  model->to(device);

  std::mt19937 rng(232);
  std::vector<Utterances> dev;
  for (int i = 0; i < 4; ++i)
    dev.push_back(synth_batch(kBatch, rng));

  CtcTrainer trainer(model, device);
  for (int epoch = 0; epoch < 3; ++epoch) {
    trainer.fit_epoch(200, rng);
    std::cout << "dev ctc " << trainer.validate(dev) << "\n";
  }
  trainer.print_samples(dev[0], 3);

  std::vector<torch::Tensor> clips;
  for (int i = 0; i < 6; ++i)
    clips.push_back(synth_batch(1, rng).feats[0]);
  load_for_inference(model, "asr_avg.pt");
  for (const auto &text : transcribe(model, clips, device))
    std::cout << "transcript: " << text << "\n";
  std::cout << "blank ratio " << blank_ratio(model, dev, device) << "\n";
  return 0;
}
