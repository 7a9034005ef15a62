// Extractive question answering on a synthetic reading-comprehension set: a
// BiLSTM reader encodes "[question] [SEP] [passage]" token ids and predicts the
// start and end of the answer span. Pretraining on the general set accumulates
// micro-batches through a `scaled()` helper; fine-tuning on the small in-domain
// set accumulates too. Two trackers report the loss: a tensor tracker whose
// curve is dumped per epoch, and a scalar tracker for the console.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace qa {

constexpr int64_t kVocab = 8000, kLen = 192, kEmb = 128, kHidden = 128;

struct Example {
  torch::Tensor tokens;  // B x kLen
  torch::Tensor start;   // B
  torch::Tensor end;     // B
};

Example synth_batch(int64_t b) {
  auto tokens = torch::randint(1, kVocab, {b, kLen}, torch::kLong);
  auto start = torch::randint(16, kLen - 16, {b}, torch::kLong);
  auto end = start + torch::randint(0, 12, {b}, torch::kLong);
  return {tokens, start, end};
}

struct SpanLogits {
  torch::Tensor start;  // B x kLen
  torch::Tensor end;    // B x kLen
};

struct ReaderImpl : nn::Module {
  ReaderImpl()
      : emb(register_module("emb", nn::Embedding(kVocab, kEmb))),
        lstm(register_module("lstm", nn::LSTM(nn::LSTMOptions(kEmb, kHidden).num_layers(2).bidirectional(true).batch_first(true)))),
        drop(register_module("drop", nn::Dropout(0.1))),
        head(register_module("head", nn::Linear(2 * kHidden, 2))) {}

  SpanLogits forward(const torch::Tensor &tokens) {
    auto h = std::get<0>(lstm->forward(emb(tokens)));
    auto logits = head(drop(h));  // B x kLen x 2
    return {logits.select(2, 0), logits.select(2, 1)};
  }

  nn::Embedding emb;
  nn::LSTM lstm;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(Reader);

// Start and end cross-entropies, each a batch mean, summed as in the SQuAD baselines.
torch::Tensor span_loss(const SpanLogits &out, const Example &ex) {
  return F::cross_entropy(out.start, ex.start) + F::cross_entropy(out.end, ex.end);
}

// The loss of one micro-batch, as its share of the accumulated batch.
torch::Tensor scaled(const torch::Tensor &loss, int64_t accum) { return loss / static_cast<double>(accum); }

// Keeps every step's loss as a tensor, dumped as the loss curve per epoch.
class MetricTracker {
 public:
  void update(const torch::Tensor &loss) {
    // BUG(torch-loss-accumulation-graph): the caller hands the training loss with its graph; the member vector keeps every step's graph.
    history_.push_back(loss);
  }
  torch::Tensor curve() const { return torch::stack(history_); }
  void reset() { history_.clear(); }

 private:
  std::vector<torch::Tensor> history_;
};

// Running mean of host scalars.
class ScalarTracker {
 public:
  void update(double v) {
    sum_ += v;
    ++n_;
  }
  double mean() const { return n_ > 0 ? sum_ / static_cast<double>(n_) : 0.0; }
  void reset() { sum_ = 0.0, n_ = 0; }

 private:
  double sum_ = 0.0;
  int64_t n_ = 0;
};

class QaTrainer {
 public:
  QaTrainer(Reader reader, torch::Device device)
      : reader_(std::move(reader)), device_(device), opt_(reader_->parameters(), torch::optim::AdamOptions(5e-4)) {
    reader_->to(device_);
  }

  Example to_device(const Example &ex) const { return {ex.tokens.to(device_), ex.start.to(device_), ex.end.to(device_)}; }

  void pretrain_epoch(int64_t micro_batches, int64_t batch, int64_t accum) {
    reader_->train();
    opt_.zero_grad();
    for (int64_t m = 0; m < micro_batches; ++m) {
      auto ex = to_device(synth_batch(batch));
      auto out = reader_->forward(ex.tokens);
      auto loss = span_loss(out, ex);
      // OK(torch-grad-accumulation-unscaled): the helper divides the loss by the number of micro-batches.
      scaled(loss, accum).backward();
      curve_.update(loss);
      // OK(torch-loss-accumulation-graph): the scalar tracker gets a host double.
      // BUG(torch-host-sync-in-loop): the loss is read back to the host on every micro-batch for the console mean.
      console_.update(loss.item<double>());
      // BUG(torch-host-sync-in-loop): the predicted starts are copied to the host on every step to log one span.
      auto pred_start = out.start.argmax(1).to(torch::kCPU);
      // OK(torch-host-sync-in-loop): pred_start is already a CPU tensor.
      last_span_.push_back(pred_start[0].item<int64_t>());
      if ((m + 1) % accum == 0) {
        nn::utils::clip_grad_norm_(reader_->parameters(), 1.0);
        opt_.step();
        opt_.zero_grad();
      }
    }
    std::cout << "pretrain loss " << console_.mean() << " curve " << curve_.curve().mean().item<double>() << '\n';
    curve_.reset();
    console_.reset();
  }

  void finetune_epoch(int64_t micro_batches, int64_t batch, int64_t accum) {
    reader_->train();
    opt_.zero_grad();
    int64_t micro = 0;
    auto epoch_sum = torch::zeros({}, torch::TensorOptions().device(device_));
    for (int64_t m = 0; m < micro_batches; ++m) {
      auto ex = to_device(synth_batch(batch));
      auto loss = span_loss(reader_->forward(ex.tokens), ex);
      // BUG(torch-grad-accumulation-unscaled): the helper's sum of two mean cross-entropies reaches backward() undivided, and step() runs every 'accum' micro-batches.
      loss.backward();
      // OK(torch-loss-accumulation-graph): detached before the sum.
      epoch_sum += loss.detach();
      if (++micro % accum == 0) {
        opt_.step();
        opt_.zero_grad();
        // OK(torch-host-sync-in-loop): read once per optimizer step, under the step's condition.
        std::cout << "  update " << micro / accum << " loss " << loss.item<double>() << '\n';
      }
    }
    std::cout << "finetune loss " << (epoch_sum / static_cast<double>(micro_batches)).item<double>() << '\n';
  }

  std::pair<double, double> evaluate(int64_t batches, int64_t batch) {
    torch::NoGradGuard no_grad;
    reader_->eval();
    auto total = torch::zeros({}, torch::TensorOptions().device(device_));
    auto exact = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(device_));
    for (int64_t i = 0; i < batches; ++i) {
      auto ex = to_device(synth_batch(batch));
      auto out = reader_->forward(ex.tokens);
      // OK(torch-loss-accumulation-graph): computed under the no-grad guard, so no graph is kept.
      total += span_loss(out, ex);
      exact += (out.start.argmax(1).eq(ex.start) & out.end.argmax(1).eq(ex.end)).sum();
    }
    const double n = static_cast<double>(batches * batch);
    return {total.item<double>() / static_cast<double>(batches), exact.item<double>() / n};
  }

  const std::vector<int64_t> &last_spans() const { return last_span_; }

 private:
  Reader reader_;
  torch::Device device_;
  torch::optim::Adam opt_;
  MetricTracker curve_;
  ScalarTracker console_;
  std::vector<int64_t> last_span_;
};

}  // namespace qa

int main() {
  using namespace qa;
  torch::manual_seed(404);
  // OK(torch-cuda-unguarded): CUDA only when the runtime has a device.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  QaTrainer trainer(Reader(), device);
  for (int epoch = 0; epoch < 3; ++epoch) {
    trainer.pretrain_epoch(/*micro_batches=*/64, /*batch=*/16, /*accum=*/4);
    auto [loss, em] = trainer.evaluate(8, 32);
    std::cout << "epoch " << epoch << " dev loss " << loss << " EM " << em << '\n';
  }
  for (int epoch = 0; epoch < 2; ++epoch) {
    trainer.finetune_epoch(/*micro_batches=*/32, /*batch=*/8, /*accum=*/8);
    auto [loss, em] = trainer.evaluate(4, 32);
    std::cout << "in-domain epoch " << epoch << " dev loss " << loss << " EM " << em << '\n';
  }
  std::cout << "logged " << trainer.last_spans().size() << " predicted spans\n";
  return 0;
}
