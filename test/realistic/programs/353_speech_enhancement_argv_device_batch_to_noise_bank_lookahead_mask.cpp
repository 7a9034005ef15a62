// Speech enhancement on magnitude spectrograms: a small look-ahead attention
// network predicts a time-frequency mask for noisy frames. The device comes
// from the command line (`./enhance cuda:0 8`); batches are a struct with a
// `to()` of their own, extra noise is mixed in on the fly from a bank of
// recorded clips, and the loss weights low frequencies (speech) more.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace nn = torch::nn;

namespace enhance {

constexpr int64_t kBins = 64, kFrames = 48, kModel = 96, kLookahead = 2;

struct Batch {
  torch::Tensor noisy;  // [B, T, F]
  torch::Tensor clean;  // [B, T, F]
  Batch to(torch::Device d) const { return {noisy.to(d), clean.to(d)}; }
};

// Masked where a frame would attend more than `lookahead` frames ahead.
torch::Tensor lookahead_mask(int64_t frames, int64_t lookahead) {
  return torch::ones({frames, frames}, torch::kBool).triu(lookahead + 1);
}

torch::Tensor sinusoid_table(int64_t frames, int64_t dim) {
  auto pos = torch::arange(frames, torch::kFloat).unsqueeze(1);
  auto div = torch::exp(torch::arange(0, dim, 2, torch::kFloat) * (-std::log(10000.0) / static_cast<double>(dim)));
  auto table = torch::zeros({frames, dim});
  table.slice(1, 0, dim, 2) = torch::sin(pos * div);
  table.slice(1, 1, dim, 2) = torch::cos(pos * div);
  return table;
}

struct EnhancerImpl : nn::Module {
  EnhancerImpl()
      : in_proj(register_module("in_proj", nn::Linear(kBins, kModel))),
        qkv(register_module("qkv", nn::Linear(kModel, 3 * kModel))),
        out_proj(register_module("out_proj", nn::Linear(kModel, kBins))),
        drop(register_module("drop", nn::Dropout(0.1))) {
    positions = register_buffer("positions", sinusoid_table(kFrames, kModel));
  }
  torch::Tensor forward(const torch::Tensor &noisy) {
    const auto t = noisy.size(1);
    // OK(torch-device-mismatch): a registered buffer moves with the module.
    auto h = in_proj->forward(torch::log1p(noisy)) + positions.slice(0, 0, t);
    auto parts = qkv->forward(h).chunk(3, -1);
    auto scores = torch::matmul(parts[0], parts[1].transpose(1, 2)) / std::sqrt(static_cast<double>(kModel));
    // BUG(torch-device-mismatch): the look-ahead mask comes from a helper
    // with default options, on the CPU, while the scores are on the module's device.
    scores = scores.masked_fill(lookahead_mask(t, kLookahead), -1e9);
    auto ctx = torch::matmul(torch::softmax(scores, -1), parts[2]);
    auto mask = torch::sigmoid(out_proj->forward(drop->forward(ctx + h)));
    return mask * noisy;
  }
  nn::Linear in_proj, qkv, out_proj;
  nn::Dropout drop;
  torch::Tensor positions;
};
TORCH_MODULE(Enhancer);

class SpeechCorpus {
 public:
  SpeechCorpus(int64_t utterances, uint64_t seed) {
    torch::manual_seed(seed);
    auto pitch = torch::rand({utterances, 1, 1}) * 8 + 2;
    auto bins = torch::arange(kBins, torch::kFloat).view({1, 1, kBins});
    auto frames = torch::arange(kFrames, torch::kFloat).view({1, kFrames, 1});
    clean_ = torch::relu(torch::cos(bins / pitch * 3.14159) * torch::sin(frames * 0.2).abs());
    noisy_ = clean_ + 0.3 * torch::rand_like(clean_);
  }
  int64_t size() const { return clean_.size(0); }
  Batch batch(int64_t first, int64_t count) const {
    return {noisy_.narrow(0, first, count), clean_.narrow(0, first, count)};
  }

 private:
  torch::Tensor clean_, noisy_;
};

class NoiseBank {
 public:
  explicit NoiseBank(size_t capacity) : capacity_(capacity) {}
  void add(torch::Tensor clip) {
    clips_.push_back(std::move(clip));
    if (clips_.size() > capacity_)
      clips_.pop_front();
  }
  const torch::Tensor &pick(size_t i) const { return clips_[i % clips_.size()]; }

 private:
  size_t capacity_;
  std::deque<torch::Tensor> clips_;  // each [T, F], recorded on the host
};

torch::Tensor frequency_weights(int64_t bins) { return torch::linspace(1.0, 0.25, bins); }

torch::Tensor weighted_l1(const torch::Tensor &pred, const torch::Tensor &target, const torch::Tensor &weights) {
  return ((pred - target).abs() * weights).mean();
}

class EnhancerTrainer {
 public:
  EnhancerTrainer(Enhancer model, torch::Device device, NoiseBank bank)
      : model_(std::move(model)), device_(device), bank_(std::move(bank)), weights_(frequency_weights(kBins)),
        opt_(model_->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-4)) {
    model_->to(device_);
  }

  double train_epoch(const SpeechCorpus &corpus, int64_t batch_size) {
    model_->train();
    auto total = torch::zeros({}, device_);
    int64_t steps = 0;
    for (int64_t i = 0; i + batch_size <= corpus.size(); i += batch_size, ++steps) {
      // OK(torch-device-mismatch): Batch::to() moves both fields.
      auto b = corpus.batch(i, batch_size).to(device_);
      // BUG(torch-device-mismatch): the bank's clips were recorded on the
      // host; mixing them into the moved batch combines two devices.
      auto noisy = b.noisy + 0.2 * bank_.pick(static_cast<size_t>(steps));
      opt_.zero_grad();
      auto enhanced = model_->forward(noisy);
      // BUG(torch-device-mismatch): the frequency weights were built on the
      // CPU in the constructor; weighted_l1() multiplies them with the error.
      auto loss = weighted_l1(enhanced, b.clean, weights_);
      loss.backward();
      opt_.step();
      total += loss.detach();
    }
    return total.item<double>() / static_cast<double>(steps);
  }

  double validate(const SpeechCorpus &corpus) {
    torch::NoGradGuard no_grad;
    model_->eval();
    auto total = torch::zeros({}, device_);
    for (int64_t i = 0; i + 16 <= corpus.size(); i += 16) {
      Batch b = corpus.batch(i, 16);
      // BUG(torch-device-mismatch): the validation batch skipped Batch::to();
      // its noisy frames are still on the CPU.
      auto enhanced = model_->forward(b.noisy);
      // OK(torch-device-mismatch): the target follows the output.
      total += (enhanced - b.clean.to(enhanced.device())).abs().mean();
    }
    model_->train();
    return total.item<double>() / static_cast<double>(corpus.size() / 16);
  }

 private:
  Enhancer model_;
  torch::Device device_;
  NoiseBank bank_;
  torch::Tensor weights_;
  torch::optim::AdamW opt_;
};

}  // namespace enhance

int main(int argc, char **argv) {
  using namespace enhance;
  // OK(torch-cuda-unguarded): the CUDA default is only taken when the runtime has CUDA.
  // BUG(torch-device-index-unchecked): the default ordinal 1 (the card that
  // does not drive the display) is never compared with device_count().
  const std::string spec = argc > 1 ? argv[1] : (torch::cuda::is_available() ? "cuda:1" : "cpu");
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 6;
  torch::Device device(spec);

  SpeechCorpus train(1024, 353), val(128, 354);
  NoiseBank bank(32);
  std::mt19937 rng(353);
  std::uniform_real_distribution<float> level(0.05f, 0.3f);
  for (int c = 0; c < 48; ++c)
    bank.add(level(rng) * torch::rand({kFrames, kBins}));

  EnhancerTrainer trainer(Enhancer(), device, std::move(bank));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const double loss = trainer.train_epoch(train, 32);
    std::cout << "epoch " << epoch << " loss " << loss << " val L1 " << trainer.validate(val) << '\n';
  }
}
