// Language identification from raw UTF-8 bytes: a byte CNN encodes a
// snippet, named linear heads (kept in a map so tasks can be added from the
// config) predict the language and the script, a dialect head separates
// regional variants and a confidence estimator learns when the language
// prediction is right. LidSystem switches its submodules between training
// and inference with set_training(); the trainer hands the system to a
// validator, which hands it to the metric functions.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kLangs = 12, kScripts = 4, kDialects = 3, kLen = 48;

struct Batch {
  torch::Tensor bytes;                  // [B, 48] int64 byte values
  torch::Tensor lang, script, dialect;  // [B]
};

std::vector<Batch> synth(int batches, int64_t n, const torch::Device& device) {
  const auto lopt = torch::TensorOptions().dtype(torch::kLong);
  std::vector<Batch> out;
  for (int i = 0; i < batches; ++i) {
    auto lang = torch::randint(0, kLangs, {n}, lopt);
    auto dialect = torch::randint(0, kDialects, {n}, lopt);
    // Each language (and, less so, each dialect) favours its own byte range.
    auto bytes = ((lang * 20 + dialect * 5).view({n, 1}) + torch::randint(0, 24, {n, kLen}, lopt)) % 256;
    out.push_back({bytes.to(device), lang.to(device), (lang % kScripts).to(device), dialect.to(device)});
  }
  return out;
}

struct ByteEncoderImpl : nn::Module {
  explicit ByteEncoderImpl(int64_t dim)
      : embed(register_module("embed", nn::Embedding(256, 64))),
        conv(register_module("conv", nn::Conv1d(nn::Conv1dOptions(64, dim, 5).padding(2)))),
        bn(register_module("bn", nn::BatchNorm1d(dim))),
        drop(register_module("drop", nn::Dropout(0.2))) {}
  torch::Tensor forward(const torch::Tensor& bytes) {
    auto h = torch::relu(bn(conv(embed(bytes).transpose(1, 2))));  // [B, dim, L]
    return drop(std::get<0>(h.max(2)));                            // [B, dim]
  }
  nn::Embedding embed;
  nn::Conv1d conv;
  nn::BatchNorm1d bn;
  nn::Dropout drop;
};
TORCH_MODULE(ByteEncoder);

// Predicts whether the language head's top guess is right.
struct ConfidenceImpl : nn::Module {
  explicit ConfidenceImpl(int64_t dim)
      : mlp(register_module("mlp", nn::Sequential(nn::Linear(dim + 1, 64), nn::ReLU(), nn::Dropout(0.3),
                                                  nn::Linear(64, 1)))) {}
  torch::Tensor forward(const torch::Tensor& feats, const torch::Tensor& top_prob) {
    return mlp->forward(torch::cat({feats, top_prob.unsqueeze(1)}, 1)).squeeze(1);
  }
  nn::Sequential mlp;
};
TORCH_MODULE(Confidence);

class LidSystem {
 public:
  LidSystem(int64_t dim, const torch::Device& device)
      : encoder_(dim),
        confidence_(dim),
        dialect_(nn::Linear(dim, 64), nn::ReLU(), nn::Dropout(0.25), nn::Linear(64, kDialects)) {
    heads_.emplace("lang", nn::AnyModule(nn::Linear(dim, kLangs)));
    heads_.emplace("script", nn::AnyModule(nn::Linear(dim, kScripts)));
    encoder_->to(device);
    confidence_->to(device);
    dialect_->to(device);
    for (auto& kv : heads_) kv.second.ptr()->to(device);
  }
  // Training or inference behaviour of the submodules (the heads are plain linear layers).
  void set_training(bool on) {
    encoder_->train(on);
    confidence_->train(on);
  }
  ByteEncoder& encoder() { return encoder_; }
  Confidence& confidence() { return confidence_; }
  nn::Sequential& dialect() { return dialect_; }
  torch::Tensor head(const std::string& name, const torch::Tensor& feats) { return heads_.at(name).forward(feats); }
  std::vector<torch::Tensor> parameters() const {
    auto params = encoder_->parameters();
    for (const auto& p : confidence_->parameters()) params.push_back(p);
    for (const auto& p : dialect_->parameters()) params.push_back(p);
    for (const auto& kv : heads_)
      for (const auto& p : kv.second.ptr()->parameters()) params.push_back(p);
    return params;
  }

 private:
  ByteEncoder encoder_;
  Confidence confidence_;
  nn::Sequential dialect_;
  std::map<std::string, nn::AnyModule> heads_;
};

namespace metrics {

// Macro-averaged F1 of the language head.
double macro_f1(LidSystem& sys, const std::vector<Batch>& data) {
  auto tp = torch::zeros({kLangs}), fp = torch::zeros({kLangs}), fn = torch::zeros({kLangs});
  for (const auto& b : data) {
    // OK(torch-eval-mode-missing): the validator called set_training(false), which reaches the encoder.
    // BUG(torch-inference-without-no-grad): the validator's guard covers the other metrics, not this one.
    auto pred = sys.head("lang", sys.encoder()->forward(b.bytes)).argmax(1).cpu();
    auto p = F::one_hot(pred, kLangs).to(torch::kFloat), g = F::one_hot(b.lang.cpu(), kLangs).to(torch::kFloat);
    tp += (p * g).sum(0);
    fp += (p * (1 - g)).sum(0);
    fn += ((1 - p) * g).sum(0);
  }
  return (2 * tp / (2 * tp + fp + fn).clamp_min(1)).mean().item<double>();
}

double dialect_accuracy(LidSystem& sys, const std::vector<Batch>& data) {
  int64_t correct = 0, total = 0;
  for (const auto& b : data) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): encoder switched by set_training(false); caller's guard.
    auto feats = sys.encoder()->forward(b.bytes);
    // BUG(torch-eval-mode-missing): set_training() was never taught about the dialect head; its dropout is still on.
    auto logits = sys.dialect()->forward(feats);
    correct += logits.argmax(1).eq(b.dialect).sum().item<int64_t>();
    total += b.dialect.size(0);
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

// Mean |confidence - correctness| over the split.
double calibration_gap(LidSystem& sys, const std::vector<Batch>& data) {
  double gap = 0.0;
  for (const auto& b : data) {
    auto feats = sys.encoder()->forward(b.bytes);
    auto probs = sys.head("lang", feats).softmax(1);
    auto top = probs.max(1);
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): set_training(false) reached it; caller's guard.
    auto conf = torch::sigmoid(sys.confidence()->forward(feats, std::get<0>(top)));
    gap += (conf - std::get<1>(top).eq(b.lang).to(torch::kFloat)).abs().mean().item<double>();
  }
  return gap / static_cast<double>(data.size());
}

}  // namespace metrics

class Validator {
 public:
  void report(LidSystem& sys, const std::vector<Batch>& val, const std::string& tag) {
    sys.set_training(false);
    const double f1 = metrics::macro_f1(sys, val);
    double dialect = 0.0, gap = 0.0;
    {
      torch::NoGradGuard no_grad;
      dialect = metrics::dialect_accuracy(sys, val);
      gap = metrics::calibration_gap(sys, val);
    }
    history_.push_back(f1);
    std::cout << tag << ": macro-F1 " << f1 << " dialect acc " << dialect << " calibration gap " << gap << '\n';
  }
  double best() const {
    double b = 0.0;
    for (double f : history_) b = f > b ? f : b;
    return b;
  }

 private:
  std::vector<double> history_;
};

class LidTrainer {
 public:
  LidTrainer(LidSystem& system, Validator& validator)
      : system_(system), validator_(validator), opt_(system.parameters(), torch::optim::AdamWOptions(2e-3)) {}

  void fit(const std::vector<Batch>& train, const std::vector<Batch>& val, int epochs) {
    system_.set_training(true);
    validator_.report(system_, val, "untrained");  // baseline row of the learning curve
    for (int epoch = 0; epoch < epochs; ++epoch) {
      const double acc = train_epoch(train);
      std::cout << "epoch " << epoch << " train acc " << acc << '\n';
      validator_.report(system_, val, "epoch " + std::to_string(epoch));
    }
  }

 private:
  double train_epoch(const std::vector<Batch>& data) {
    int64_t correct = 0, seen = 0;
    for (const auto& b : data) {
      opt_.zero_grad();
      // BUG(torch-eval-mode-missing): every report() ends in set_training(false) and nothing switches back: training without dropout, BatchNorm frozen.
      auto feats = system_.encoder()->forward(b.bytes);
      auto lang_logits = system_.head("lang", feats);
      // OK(torch-eval-mode-missing): set_training() never touches the dialect head, so it trains in training mode.
      auto dialect_logits = system_.dialect()->forward(feats);
      auto right = lang_logits.argmax(1).eq(b.lang).to(torch::kFloat);
      auto top = std::get<0>(lang_logits.softmax(1).max(1)).detach();
      // BUG(torch-eval-mode-missing): the confidence estimator is switched by the same set_training(false) and never back.
      auto conf_logits = system_.confidence()->forward(feats.detach(), top);
      auto loss = F::cross_entropy(lang_logits, b.lang) + 0.3 * F::cross_entropy(system_.head("script", feats), b.script) +
                  0.3 * F::cross_entropy(dialect_logits, b.dialect) +
                  F::binary_cross_entropy_with_logits(conf_logits, right);
      loss.backward();
      opt_.step();
      // BUG(torch-host-sync-in-loop): a blocking read of the device counts on every step.
      correct += right.sum().item<int64_t>();
      seen += b.lang.size(0);
    }
    return static_cast<double>(correct) / static_cast<double>(seen);
  }

  LidSystem& system_;
  Validator& validator_;
  torch::optim::AdamW opt_;
};

int main() {
  torch::manual_seed(333);
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  LidSystem system(192, device);
  Validator validator;
  LidTrainer trainer(system, validator);
  trainer.fit(synth(60, 32, device), synth(6, 64, device), 5);
  std::cout << "best macro-F1 " << validator.best() << '\n';

  // Language of a few snippets for the demo page.
  system.set_training(false);
  c10::InferenceMode guard;
  auto snippets = synth(1, 8, device).front();
  // OK(torch-eval-mode-missing): set_training(false) just above.
  auto feats = system.encoder()->forward(snippets.bytes);
  auto langs = system.head("lang", feats).argmax(1).cpu();
  for (int64_t i = 0; i < langs.size(0); ++i) std::cout << "snippet " << i << " -> lang " << langs[i].item<int64_t>() << '\n';
}
