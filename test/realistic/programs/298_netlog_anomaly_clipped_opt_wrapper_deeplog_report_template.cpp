// Anomaly detection in network device logs. Syslog lines are parsed into 64
// event templates; each one-minute window becomes a vector of template counts
// and a history of the last ten event ids. An autoencoder of Linear/ReLU
// layers learns normal windows (reconstruction error above the 99th
// percentile raises an alert), and a DeepLog-style next-event classifier
// flags windows whose next event is not among its top-5 predictions. The
// flagged windows' event histories are dumped for the SOC analysts.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kTemplates = 64, kHistory = 10;

struct WindowBatch {
  torch::Tensor counts;      // [B, 64] log1p of template counts per minute
  torch::Tensor history;     // [B, 10] last event ids, 1..64
  torch::Tensor next_event;  // [B]
};

WindowBatch synth_windows(int64_t n, bool attack) {
  auto rates = torch::rand({kTemplates}).pow(3) * 20;
  auto counts = torch::poisson(rates.expand({n, kTemplates}).contiguous());
  if (attack)
    counts.select(1, 7) += 40;  // a burst of "authentication failure"
  auto history = torch::randint(1, kTemplates + 1, {n, kHistory}, torch::kLong);
  auto next = history.select(1, kHistory - 1) % kTemplates + 1;
  return {torch::log1p(counts), history, next};
}

// Training goes to the second card when there is one; the first serves the
// live scorer of the collector.
torch::Device training_device() {
  if (!torch::cuda::is_available())
    return torch::Device(torch::kCPU);
  // OK(torch-device-index-unchecked, torch-cuda-unguarded): ordinal 1 only when device_count() says it exists.
  return torch::cuda::device_count() > 1 ? torch::Device(torch::kCUDA, 1) : torch::Device(torch::kCUDA, 0);
}

template <typename Holder>
void place(Holder &module, const torch::Device &device) {
  // OK(torch-tensor-to-discarded): Module::to moves the parameters in place.
  module->to(device);
}

struct AutoencoderImpl : nn::Module {
  AutoencoderImpl()
      : net(register_module("net", nn::Sequential(nn::Linear(kTemplates, 32), nn::ReLU(), nn::Linear(32, 8),
                                                  nn::ReLU(), nn::Linear(8, 32), nn::ReLU(),
                                                  nn::Linear(32, kTemplates)))) {}
  torch::Tensor forward(const torch::Tensor &x) { return net->forward(x); }
  nn::Sequential net;
};
TORCH_MODULE(Autoencoder);

struct NextEventNetImpl : nn::Module {
  NextEventNetImpl()
      : embed(register_module("embed", nn::Embedding(kTemplates + 1, 32))),
        mlp(register_module("mlp", nn::Sequential(nn::Linear(kHistory * 32, 128), nn::ReLU(), nn::Dropout(0.3),
                                                  nn::Linear(128, kTemplates + 1)))) {}
  torch::Tensor forward(const torch::Tensor &history) { return mlp->forward(embed(history).flatten(1)); }
  nn::Embedding embed;
  nn::Sequential mlp;
};
TORCH_MODULE(NextEventNet);

// Clips the gradient norm, steps, and clears the gradients for the next batch.
class ClippedOptimizer {
 public:
  ClippedOptimizer(std::vector<torch::Tensor> params, double lr, double max_norm)
      : params_(std::move(params)), opt_(params_, torch::optim::AdamOptions(lr)), max_norm_(max_norm) {}
  void step() {
    nn::utils::clip_grad_norm_(params_, max_norm_);
    opt_.step();
    opt_.zero_grad();
  }

 private:
  std::vector<torch::Tensor> params_;
  torch::optim::Adam opt_;
  double max_norm_;
};

struct LossHistory {
  std::vector<std::pair<int64_t, double>> points;
  void add(int64_t step, double value) { points.emplace_back(step, value); }
};

template <typename Sink>
void report(Sink &sink, int64_t step, const torch::Tensor &loss) {
  // BUG(torch-host-sync-in-loop): main()'s DeepLog loop reports every step;
  // the read waits for the whole step on the GPU each time.
  sink.add(step, loss.item<double>());
}

// Trains on normal traffic; returns the last epoch's per-window errors.
torch::Tensor fit_autoencoder(Autoencoder &ae, const std::vector<WindowBatch> &normal, const torch::Device &device,
                              int epochs, LossHistory &hist) {
  ClippedOptimizer opt(ae->parameters(), 1e-3, 1.0);
  std::vector<torch::Tensor> last_errors;
  int64_t step = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    last_errors.clear();
    for (const auto &b : normal) {
      auto x = b.counts.to(device);
      auto per_window = (ae->forward(x) - x).pow(2).mean(1);
      auto loss = per_window.mean();
      loss.backward();
      // OK(torch-missing-zero-grad): ClippedOptimizer::step() zeroes the gradients after stepping.
      opt.step();
      // OK(torch-loss-accumulation-graph): detached inside the push.
      last_errors.push_back(per_window.detach());
      if (++step % 100 == 0)
        // OK(torch-host-sync-in-loop): every 100 steps.
        report(hist, step, loss);
    }
  }
  // OK(torch-host-sync-in-loop): once, after training.
  return torch::cat(last_errors).cpu();
}

class DeepLogTrainer {
 public:
  DeepLogTrainer(NextEventNet net, torch::Device device)
      : net_(std::move(net)), device_(device), opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)) {}
  void begin_epoch() {
    net_->train();
    opt_.zero_grad();
  }
  torch::Tensor train_batch(const WindowBatch &b) {
    // OK(torch-eval-mode-missing): begin_epoch() called train().
    auto logits = net_->forward(b.history.to(device_));
    auto loss = F::cross_entropy(logits, b.next_event.to(device_));
    loss.backward();
    // BUG(torch-missing-zero-grad): only begin_epoch() resets: every step
    // of the epoch applies the sum of all the epoch's gradients so far.
    opt_.step();
    return loss.detach();
  }

 private:
  NextEventNet net_;
  torch::Device device_;
  torch::optim::Adam opt_;
};

double topk_miss_rate(NextEventNet &net, const std::vector<WindowBatch> &val, const torch::Device &device, int64_t k) {
  net->eval();
  torch::NoGradGuard no_grad;
  auto misses = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(device));
  int64_t n = 0;
  for (const auto &b : val) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and the guard above.
    auto topk = std::get<1>(net->forward(b.history.to(device)).topk(k, 1));
    // OK(torch-loss-accumulation-graph): indices and comparisons carry no graph.
    misses += (topk != b.next_event.to(device).unsqueeze(1)).all(1).sum();
    n += b.history.size(0);
  }
  net->train();
  return misses.item<double>() / static_cast<double>(n);
}

// Live scoring: returns the indices of the windows above the threshold.
std::vector<int64_t> score_stream(Autoencoder &ae, const std::vector<WindowBatch> &stream, const torch::Device &device,
                                  double threshold) {
  c10::InferenceMode guard;
  const auto thr = torch::tensor(threshold);
  std::vector<int64_t> flagged;
  int64_t offset = 0;
  for (const auto &b : stream) {
    auto x = b.counts.to(device);
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): Linear/ReLU only, so the mode changes
    // nothing; InferenceMode above.
    auto err = (ae->forward(x) - x).pow(2).mean(1);
    // OK(torch-device-mismatch, torch-host-sync-in-loop): a 0-dim CPU threshold; no training here.
    auto hits = torch::nonzero(err > thr).flatten().cpu();
    for (int64_t i = 0; i < hits.size(0); ++i)
      flagged.push_back(offset + hits[i].item<int64_t>());
    offset += x.size(0);
  }
  return flagged;
}

// Row-major copy of an id table, for raw reads.
torch::Tensor row_major(const torch::Tensor &ids) { return ids.contiguous(); }

// `archive` is time-major, [10, N], as the log store keeps it.
void dump_history(const torch::Tensor &archive, const std::vector<int64_t> &rows) {
  auto history = archive.t();
  // BUG(torch-tensor-to-discarded): row_major() returns the copy; `history`
  // stays a transposed view and the raw reads below walk the wrong ids.
  row_major(history);
  const int64_t *ids = history.data_ptr<int64_t>();
  for (int64_t r : rows) {
    std::cout << "window " << r << ':';
    for (int64_t j = 0; j < kHistory; ++j)
      std::cout << ' ' << ids[r * kHistory + j];
    std::cout << '\n';
  }
}

int main() {
  torch::manual_seed(298);
  const torch::Device device = training_device();
  std::vector<WindowBatch> normal, val, stream;
  for (int i = 0; i < 50; ++i)
    normal.push_back(synth_windows(64, false));
  for (int i = 0; i < 5; ++i)
    val.push_back(synth_windows(128, false));
  for (int i = 0; i < 8; ++i)
    stream.push_back(synth_windows(32, i % 3 == 2));

  Autoencoder ae;
  place(ae, device);
  LossHistory ae_hist, log_hist;
  auto errors = fit_autoencoder(ae, normal, device, 5, ae_hist);
  // OK(torch-host-sync-in-loop): calibrated once, on the host.
  const double threshold = torch::quantile(errors, 0.99).item<double>();

  NextEventNet deeplog;
  place(deeplog, device);
  DeepLogTrainer trainer(deeplog, device);
  int64_t step = 0;
  for (int epoch = 0; epoch < 4; ++epoch) {
    trainer.begin_epoch();
    for (const auto &b : normal)
      report(log_hist, step++, trainer.train_batch(b));
    std::cout << "epoch " << epoch << " top-5 miss rate " << topk_miss_rate(deeplog, val, device, 5) << '\n';
  }

  auto flagged = score_stream(ae, stream, device, threshold);
  std::vector<torch::Tensor> histories;
  for (const auto &b : stream)
    histories.push_back(b.history);
  dump_history(torch::cat(histories).t().contiguous(), flagged);
  std::cout << flagged.size() << " windows flagged, AE threshold " << threshold << '\n';
}
