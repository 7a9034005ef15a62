// Wind-turbine gearbox fault classifier: 1-D convnet over 3-axis vibration
// windows (healthy, tooth wear, bearing pitting, misalignment, imbalance).
// The trainer is assembled from small helper classes: a GPU prefetcher
// with host staging buffers, a confusion-matrix tracker, a checkpointer that
// keeps the best validation score and restores it for the final test, and a
// logger that writes through a std::function sink.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

constexpr int64_t kAxes = 3;
constexpr int64_t kWindow = 2048;
constexpr int64_t kFaults = 5;

struct GearboxNetImpl : torch::nn::Module {
  GearboxNetImpl()
      : features(register_module(
            "features",
            torch::nn::Sequential(torch::nn::Conv1d(torch::nn::Conv1dOptions(kAxes, 32, 64).stride(8)),
                                  torch::nn::BatchNorm1d(32), torch::nn::ReLU(), torch::nn::MaxPool1d(4),
                                  torch::nn::Conv1d(torch::nn::Conv1dOptions(32, 64, 9).padding(4)),
                                  torch::nn::BatchNorm1d(64), torch::nn::ReLU(),
                                  torch::nn::AdaptiveAvgPool1d(1)))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        head(register_module("head", torch::nn::Linear(64, kFaults))) {}
  torch::Tensor forward(torch::Tensor x) { return head->forward(drop->forward(features->forward(x).flatten(1))); }
  torch::nn::Sequential features;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
};
TORCH_MODULE(GearboxNet);

struct DeviceBatch {
  torch::Tensor signals;
  torch::Tensor labels;
};

// Only built when training on CUDA: gathers a shuffled batch into a host
// staging buffer and starts the upload.
class Prefetcher {
 public:
  Prefetcher(torch::Tensor signals, torch::Tensor labels, int64_t batch, torch::Device device)
      : signals_(std::move(signals)),
        labels_(std::move(labels)),
        batch_(batch),
        device_(device),
        staging_(torch::empty({batch, kAxes, kWindow})) {
    // BUG(torch-tensor-to-discarded): pin_memory() returns a pinned copy and
    // leaves staging_ in pageable memory.
    staging_.pin_memory();
  }

  int64_t batches() const { return signals_.size(0) / batch_; }
  void shuffle() { order_ = torch::randperm(signals_.size(0), torch::kLong); }

  DeviceBatch fetch(int64_t b) {
    auto idx = order_.narrow(0, b * batch_, batch_);
    staging_.copy_(signals_.index_select(0, idx));
    auto label_host = labels_.index_select(0, idx).pin_memory();
    // BUG(torch-non-blocking-pageable): staging_ was never pinned (see the
    // constructor), so this upload is synchronous.
    auto x = staging_.to(device_, /*non_blocking=*/true);
    // OK(torch-non-blocking-pageable): the labels were pinned just above.
    auto y = label_host.to(device_, /*non_blocking=*/true);
    return {x, y};
  }

 private:
  torch::Tensor signals_, labels_;
  int64_t batch_;
  torch::Device device_;
  torch::Tensor staging_;
  torch::Tensor order_;
};

class ConfusionTracker {
 public:
  explicit ConfusionTracker(int64_t classes)
      : k_(classes), counts_(torch::zeros({classes, classes}, torch::kLong)) {}
  void reset() { counts_.zero_(); }
  void update(const torch::Tensor &logits, const torch::Tensor &labels) {
    auto pred = logits.argmax(1);
    counts_ += torch::bincount(labels * k_ + pred, {}, k_ * k_).view({k_, k_});
  }
  double accuracy() const { return counts_.diag().sum().item<double>() / counts_.sum().clamp_min(1).item<double>(); }

 private:
  int64_t k_;
  torch::Tensor counts_;
};

class Checkpointer {
 public:
  explicit Checkpointer(std::string path) : path_(std::move(path)) {}
  bool maybe_save(GearboxNet &model, double score) {
    if (best_ && *best_ >= score)
      return false;
    best_ = score;
    torch::save(model, path_);
    return true;
  }
  void restore(GearboxNet &model, torch::Device device) const { torch::load(model, path_, device); }
  std::optional<double> best() const { return best_; }

 private:
  std::string path_;
  std::optional<double> best_;
};

class Logger {
 public:
  explicit Logger(std::function<void(const std::string &)> sink) : sink_(std::move(sink)) {}
  template <typename... Args>
  void info(const Args &...args) {
    std::ostringstream os;
    (os << ... << args);
    sink_(os.str());
  }

 private:
  std::function<void(const std::string &)> sink_;
};

double validate(GearboxNet &model, const torch::Tensor &x, const torch::Tensor &y, torch::Device device,
                ConfusionTracker &tracker) {
  torch::NoGradGuard no_grad;
  model->eval();
  tracker.reset();
  for (int64_t start = 0; start < x.size(0); start += 256) {
    const int64_t n = std::min<int64_t>(256, x.size(0) - start);
    auto logits = model->forward(x.narrow(0, start, n).to(device));
    // BUG(torch-device-mismatch): update() adds the batch's counts, on
    // `device`, into the tracker's CPU counts_ (created in its constructor).
    tracker.update(logits, y.narrow(0, start, n).to(device));
  }
  model->train();
  return tracker.accuracy();
}

int main() {
  torch::manual_seed(17);
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  Logger log([](const std::string &line) { std::cout << line << std::endl; });

  auto train_x = torch::randn({12000, kAxes, kWindow});
  auto train_y = torch::randint(0, kFaults, {12000}, torch::kLong);
  auto val_x = torch::randn({2000, kAxes, kWindow});
  auto val_y = torch::randint(0, kFaults, {2000}, torch::kLong);
  auto test_x = torch::randn({2000, kAxes, kWindow});
  auto test_y = torch::randint(0, kFaults, {2000}, torch::kLong);

  GearboxNet model;
  model->to(device);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-4));
  ConfusionTracker tracker(kFaults);
  Checkpointer ckpt("gearbox_best.pt");

  std::optional<Prefetcher> prefetch;
  if (device.is_cuda())
    prefetch.emplace(train_x, train_y, 64, device);

  const int64_t max_steps = 20000;
  int64_t step = 0;
  for (int64_t epoch = 0; epoch < 40 && step < max_steps; ++epoch) {
    model->train();
    auto order = torch::randperm(train_x.size(0), torch::kLong);
    if (prefetch)
      prefetch->shuffle();
    const int64_t n_batches = train_x.size(0) / 64;
    for (int64_t b = 0; b < n_batches; ++b) {
      if (step >= max_steps)
        break;
      DeviceBatch batch;
      if (prefetch) {
        batch = prefetch->fetch(b);
      } else {
        auto idx = order.narrow(0, b * 64, 64);
        batch = {train_x.index_select(0, idx), train_y.index_select(0, idx)};
      }
      opt.zero_grad();
      auto logits = model->forward(batch.signals);
      // OK(torch-device-mismatch): both halves of the batch come from the
      // same branch, on the same device.
      auto loss = torch::nn::functional::cross_entropy(logits, batch.labels);
      loss.backward();
      opt.step();
      if (++step % 200 == 0)
        // OK(torch-host-sync-in-loop): every 200 steps.
        log.info("step ", step, " loss ", loss.item<double>());
    }
    const double acc = validate(model, val_x, val_y, device, tracker);
    if (ckpt.maybe_save(model, acc))
      log.info("epoch ", epoch, " new best val acc ", acc);
  }

  ckpt.restore(model, device);
  torch::NoGradGuard no_grad;
  model->eval();
  auto test_pred = model->forward(test_x.to(device)).argmax(1);
  // BUG(torch-device-mismatch): the restored model runs on `device`; the
  // test labels stayed on the CPU.
  auto test_acc = (test_pred == test_y).to(torch::kFloat).mean().item<double>();
  log.info("test accuracy ", test_acc, " (best val ", ckpt.best().value_or(0.0), ")");
  return 0;
}
