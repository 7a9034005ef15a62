// Sequence-sum regression with a curriculum: the sequence length and the
// batch size change with the phase of training. Metrics go through a small
// registry keyed by name ("train/loss", "train/acc", ...) that keeps running
// sums on the device and is read once per epoch. Before training, one step
// at the largest phase is probed to see whether it fits in memory.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <unordered_map>
#include <vector>

struct RunConfig {
  // BUG(torch-cuda-unguarded): main() builds the config without ever asking
  // torch::cuda::is_available(); there is no CPU path.
  torch::Device device{torch::kCUDA};
  int64_t epochs = 12;
  double lr = 2e-3;
};

struct Phase {
  int64_t seq_len;
  int64_t batch;
};

class Curriculum {
 public:
  explicit Curriculum(std::vector<Phase> phases, int64_t epochs_per_phase)
      : phases_(std::move(phases)), epochs_per_phase_(epochs_per_phase) {}
  Phase at(int64_t epoch) const {
    auto i = static_cast<size_t>(epoch / epochs_per_phase_);
    return phases_[i < phases_.size() ? i : phases_.size() - 1];
  }
  Phase hardest() const { return phases_.back(); }

 private:
  std::vector<Phase> phases_;
  int64_t epochs_per_phase_;
};

class MetricRegistry {
 public:
  void add(const std::string &key, const torch::Tensor &value) {
    auto slot = sums_.try_emplace(key, torch::zeros({}, value.options())).first;
    // BUG(torch-loss-accumulation-graph): run_epoch() hands the training loss
    // in here on every step; the registry's running sum keeps its graph.
    slot->second += value;
    counts_[key] += 1;
  }
  double mean(const std::string &key) const {
    // OK(torch-host-sync-in-loop): read once per epoch by main(), outside any
    // training loop.
    return sums_.at(key).item<double>() / static_cast<double>(counts_.at(key));
  }
  void reset() {
    sums_.clear();
    counts_.clear();
  }

 private:
  std::unordered_map<std::string, torch::Tensor> sums_;
  std::unordered_map<std::string, int64_t> counts_;
};

struct SeqRegressorImpl : torch::nn::Module {
  SeqRegressorImpl()
      : gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(1, 48).batch_first(true)))),
        out(register_module("out", torch::nn::Linear(48, 1))) {}
  torch::Tensor forward(torch::Tensor x) {
    auto h = std::get<0>(gru->forward(x));
    return out(h.select(1, -1)).squeeze(1);
  }
  torch::nn::GRU gru;
  torch::nn::Linear out;
};
TORCH_MODULE(SeqRegressor);

struct Batch {
  torch::Tensor x, y, parity;
};

Batch make_batch(const Phase &phase, torch::Device device) {
  auto digits = torch::randint(0, 10, {phase.batch, phase.seq_len, 1});
  auto y = digits.sum({1, 2}).to(torch::kFloat) / static_cast<double>(phase.seq_len);
  auto parity = digits.sum({1, 2}).remainder(2);
  // BUG(torch-tensor-to-discarded): meant to make the parity labels float for
  // the comparison below; the converted tensor is thrown away.
  parity.to(torch::kFloat);
  return {digits.to(torch::kFloat).to(device), y.to(device), parity.to(device)};
}

torch::Tensor train_step(SeqRegressor &model, torch::optim::Optimizer &opt, const Batch &b) {
  auto pred = model->forward(b.x);
  auto loss = torch::mse_loss(pred, b.y);
  opt.zero_grad();
  loss.backward();
  opt.step();
  return loss;
}

// Called once before training: can the hardest phase run at all?
bool probe_hardest(SeqRegressor &model, torch::optim::Optimizer &opt, const Curriculum &cur, torch::Device device) {
  Batch b = make_batch(cur.hardest(), device);
  try {
    train_step(model, opt, b);
    return true;
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): the allocator already released its
    // cache before raising; the same batch is tried again unchanged.
    c10::cuda::CUDACachingAllocator::emptyCache();
    train_step(model, opt, b);
    return true;
  }
}

void run_epoch(SeqRegressor &model, torch::optim::Optimizer &opt, MetricRegistry &metrics, const Phase &phase,
               torch::Device device) {
  model->train();
  for (int64_t step = 0; step < 100; ++step) {
    Batch b = make_batch(phase, device);
    auto loss = train_step(model, opt, b);
    metrics.add("train/loss", loss);
    auto hit = ((b.y * phase.seq_len).round().remainder(2) == b.parity).to(torch::kFloat).mean();
    // OK(torch-loss-accumulation-graph): a comparison of labels; no graph.
    metrics.add("train/parity", hit);
  }
}

int main() {
  RunConfig config;
  Curriculum curriculum({{8, 256}, {16, 128}, {32, 64}, {64, 32}}, 3);
  SeqRegressor model;
  model->to(config.device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(config.lr));

  if (!probe_hardest(model, opt, curriculum, config.device))
    return 1;

  MetricRegistry metrics;
  for (int64_t epoch = 0; epoch < config.epochs; ++epoch) {
    const Phase phase = curriculum.at(epoch);
    metrics.reset();
    run_epoch(model, opt, metrics, phase, config.device);
    std::cout << "epoch " << epoch << " len " << phase.seq_len << " batch " << phase.batch << " loss "
              << metrics.mean("train/loss") << " parity " << metrics.mean("train/parity") << '\n';
  }
  return 0;
}
