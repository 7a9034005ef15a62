// Radiology report generation: a small CNN encodes a chest X-ray into the
// initial state of a GRU decoder that writes the findings section token by
// token (teacher forcing in training, greedy decoding for the demo). Rare
// findings get larger weights in the cross-entropy through the vocabulary's
// frequency table. Training reports go through a hook to a scalar writer
// (TensorBoard-style rows); the trainer also keeps per-split meters and an
// epoch loss recorded by a small lambda.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace report {

constexpr int64_t kSide = 64, kVocab = 48, kLen = 16, kEmb = 64, kHidden = 128;
constexpr int64_t kPad = 0, kBos = 1, kEos = 2;

struct ReportGenImpl : nn::Module {
  ReportGenImpl()
      : cnn(register_module("cnn", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, 3).stride(2).padding(1)), nn::BatchNorm2d(16), nn::ReLU(),
                                                  nn::Conv2d(nn::Conv2dOptions(16, 32, 3).stride(2).padding(1)), nn::BatchNorm2d(32), nn::ReLU(),
                                                  nn::AdaptiveAvgPool2d(1), nn::Flatten()))),
        bridge(register_module("bridge", nn::Linear(32, kHidden))),
        embed(register_module("embed", nn::Embedding(nn::EmbeddingOptions(kVocab, kEmb).padding_idx(kPad)))),
        gru(register_module("gru", nn::GRU(nn::GRUOptions(kEmb, kHidden).batch_first(true)))),
        out(register_module("out", nn::Linear(kHidden, kVocab))) {}

  // image: B x 1 x S x S, inputs: B x T -> logits B x T x V
  torch::Tensor forward(const torch::Tensor &image, const torch::Tensor &inputs) {
    auto h0 = torch::tanh(bridge(cnn->forward(image))).unsqueeze(0);
    return out(std::get<0>(gru->forward(embed(inputs), h0)));
  }

  nn::Sequential cnn;
  nn::Linear bridge;
  nn::Embedding embed;
  nn::GRU gru;
  nn::Linear out;
};
TORCH_MODULE(ReportGen);

struct Study {
  torch::Tensor raw;     // B x 1 x S x S, 12-bit pixel values
  torch::Tensor tokens;  // B x kLen, ends with <eos> then padding
};

Study synth_studies(int64_t b) {
  auto finding = torch::randint(0, 4, {b}, torch::kLong);
  auto raw = torch::rand({b, 1, kSide, kSide}) * 3000.0 + finding.to(torch::kFloat).view({b, 1, 1, 1}) * 250.0;
  auto words = (finding.unsqueeze(1) * 10 + torch::arange(kLen, torch::kLong).remainder(10)) + 3;
  auto tokens = words.clamp_max(kVocab - 1);
  tokens.select(1, kLen - 2).fill_(kEos);
  tokens.select(1, kLen - 1).fill_(kPad);
  return {raw, tokens};
}

// Raw 12-bit pixels -> normalised input on the device.
torch::Tensor preprocess(const torch::Tensor &raw, const torch::Device &device) {
  // Mean radiograph of the training set, computed once per process.
  static const torch::Tensor mean_image = torch::full({1, 1, kSide, kSide}, 0.45);
  auto x = raw.to(device, torch::kFloat) / 4095.0;
  // BUG(torch-device-mismatch): the mean radiograph is a function-static CPU tensor; x was just moved to 'device'.
  return (x - mean_image) / 0.22;
}

// Teacher forcing: the decoder reads <bos> followed by the report shifted right.
torch::Tensor shift_right(const torch::Tensor &tokens) {
  auto bos = torch::full({tokens.size(0), 1}, kBos, torch::kLong);
  return torch::cat({bos, tokens.narrow(1, 0, tokens.size(1) - 1)}, 1);
}

class Vocabulary {
 public:
  Vocabulary() {
    auto counts = torch::linspace(5000.0, 20.0, kVocab);  // frequent template words first, rare findings last
    weights_ = (counts.sum() / (counts * static_cast<double>(kVocab))).sqrt();
    weights_[kPad] = 0.0;
  }
  const torch::Tensor &weights() const { return weights_; }
  torch::Tensor weights_on(const torch::Device &device) const { return weights_.to(device); }

 private:
  torch::Tensor weights_;
};

struct StepContext {
  int64_t step;
  torch::Tensor loss, token_acc;
};

class ScalarWriter {
 public:
  void add_scalar(const std::string &tag, const torch::Tensor &value, int64_t step) {
    // BUG(torch-host-sync-in-loop): the hook writes two scalars on every training step; each item() waits for the GPU.
    rows_.emplace_back(tag, step, value.item<double>());
  }
  size_t rows() const { return rows_.size(); }

 private:
  std::vector<std::tuple<std::string, int64_t, double>> rows_;
};

class TrainHook {
 public:
  virtual ~TrainHook() = default;
  virtual void on_step(const StepContext &) {}
};

class ScalarHook : public TrainHook {
 public:
  explicit ScalarHook(ScalarWriter &writer) : writer_(writer) {}
  void on_step(const StepContext &ctx) override {
    writer_.add_scalar("train/loss", ctx.loss, ctx.step);
    writer_.add_scalar("train/token_acc", ctx.token_acc, ctx.step);
  }

 private:
  ScalarWriter &writer_;
};

struct Meter {
  torch::Tensor loss_sum;
  int64_t batches = 0;
};

class Trainer {
 public:
  Trainer(torch::Device device, std::unique_ptr<TrainHook> hook)
      : device_(device), hook_(std::move(hook)), opt_(model_->parameters(), torch::optim::AdamOptions(5e-4)) {
    model_->to(device_);
    record_ = [this](const torch::Tensor &loss) {
      // BUG(torch-loss-accumulation-graph): the lambda is called with the live loss of every step; the epoch sum keeps each graph.
      epoch_loss_ += loss;
      ++epoch_steps_;
    };
  }

  void fit(int64_t steps, int64_t batch) {
    model_->train();
    epoch_loss_ = torch::zeros({}, torch::TensorOptions().device(device_));
    epoch_steps_ = 0;
    auto acc_sum = torch::zeros({}, torch::TensorOptions().device(device_));
    Meter &meter = meters_["train"];
    meter.loss_sum = torch::zeros({}, torch::TensorOptions().device(device_));
    for (int64_t s = 0; s < steps; ++s) {
      auto study = synth_studies(batch);
      auto image = preprocess(study.raw, device_);
      // OK(torch-device-mismatch): shifted on the host, then moved with the targets.
      auto inputs = shift_right(study.tokens).to(device_);
      auto targets = study.tokens.to(device_);
      opt_.zero_grad();
      auto logits = model_->forward(image, inputs);
      // OK(torch-device-mismatch): the class weights are asked for on 'device_'.
      auto loss = F::cross_entropy(logits.reshape({-1, kVocab}), targets.reshape({-1}),
                                   F::CrossEntropyFuncOptions().weight(vocab_.weights_on(device_)).ignore_index(kPad));
      loss.backward();
      opt_.step();
      auto token_acc = logits.argmax(-1).eq(targets).masked_select(targets != kPad).to(torch::kFloat).mean();
      hook_->on_step(StepContext{total_steps_++, loss, token_acc});
      record_(loss);
      // BUG(torch-loss-accumulation-graph): the meter, reached through a reference into the map, sums the live loss.
      meter.loss_sum += loss;
      ++meter.batches;
      // OK(torch-loss-accumulation-graph): argmax/eq carry no graph.
      acc_sum += token_acc;
    }
    std::cout << "train loss " << (epoch_loss_ / static_cast<double>(epoch_steps_)).item<double>() << " token acc "
              << (acc_sum / static_cast<double>(steps)).item<double>() << '\n';
  }

  double validate(int64_t batches, int64_t batch) {
    torch::NoGradGuard no_grad;
    model_->eval();
    auto total = torch::zeros({}, torch::TensorOptions().device(device_));
    for (int64_t i = 0; i < batches; ++i) {
      auto study = synth_studies(batch);
      auto tokens = study.tokens.to(device_);
      // BUG(torch-device-mismatch): shift_right() prepends a <bos> column built on the CPU to tokens already on 'device_'.
      auto inputs = shift_right(tokens);
      auto logits = model_->forward(preprocess(study.raw, device_), inputs);
      // BUG(torch-device-mismatch): the vocabulary's weights come from the getter on the CPU; the logits are on 'device_'.
      auto loss = F::cross_entropy(logits.reshape({-1, kVocab}), tokens.reshape({-1}),
                                   F::CrossEntropyFuncOptions().weight(vocab_.weights()).ignore_index(kPad));
      // OK(torch-loss-accumulation-graph): validation runs under NoGradGuard.
      total += loss;
    }
    // OK(torch-host-sync-in-loop): read once after the loop.
    return std::exp(total.item<double>() / static_cast<double>(batches));
  }

 private:
  torch::Device device_;
  ReportGen model_;
  Vocabulary vocab_;
  std::unique_ptr<TrainHook> hook_;
  torch::optim::Adam opt_;
  std::function<void(const torch::Tensor &)> record_;
  torch::Tensor epoch_loss_;
  int64_t epoch_steps_ = 0, total_steps_ = 0;
  std::unordered_map<std::string, Meter> meters_;
};

}  // namespace report

int main() {
  using namespace report;
  torch::manual_seed(391);
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports it.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  ScalarWriter writer;
  Trainer trainer(device, std::make_unique<ScalarHook>(writer));
  for (int epoch = 0; epoch < 3; ++epoch) {
    trainer.fit(80, 16);
    std::cout << "epoch " << epoch << " val perplexity " << trainer.validate(10, 16) << " rows " << writer.rows() << '\n';
  }
  return 0;
}
