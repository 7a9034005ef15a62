// Precipitation nowcasting from weather radar: the last four reflectivity
// frames (dBZ / 60 on a 48x48 grid around an airport) predict the next one.
// A small conv net with batch norm and dropout is trained one epoch at a
// time; skill scores come from evaluators deriving from a base whose run()
// switches the model to eval around the virtual evaluate(). A probe frame is
// predicted at the end of every epoch under a RAII mode guard, and the public
// product blends the nowcast with a climatology map.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace nowcast {

constexpr int64_t kPast = 4, kGrid = 48;
constexpr double kRainThreshold = 30.0 / 60.0;  // 30 dBZ

struct RadarSeq {
  torch::Tensor past;    // [B, 4, 48, 48]
  torch::Tensor future;  // [B, 1, 48, 48]
};

// Storm cells advected eastward one pixel per frame.
std::vector<RadarSeq> synth_storms(int64_t batches, int64_t n, const torch::Device &device) {
  std::vector<RadarSeq> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto cell = torch::rand({n, 1, kGrid, kGrid}, device).pow(4);
    std::vector<torch::Tensor> frames;
    for (int64_t t = 0; t <= kPast; ++t)
      frames.push_back(torch::roll(cell, {t}, {3}));
    auto seq = torch::cat(frames, 1);
    out.push_back({seq.slice(1, 0, kPast), seq.slice(1, kPast, kPast + 1)});
  }
  return out;
}

torch::Device pick_device() {
  // OK(torch-cuda-unguarded): kCUDA only when is_available() says so.
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

struct NowcastNetImpl : nn::Module {
  NowcastNetImpl()
      : body(register_module(
            "body", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(kPast, 32, 3).padding(1)), nn::BatchNorm2d(32),
                                   nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(32, 32, 3).padding(1)),
                                   nn::BatchNorm2d(32), nn::ReLU(), nn::Dropout(0.2),
                                   nn::Conv2d(nn::Conv2dOptions(32, 1, 1))))) {}
  torch::Tensor forward(const torch::Tensor &past) { return torch::sigmoid(body->forward(past)); }
  nn::Sequential body;
};
TORCH_MODULE(NowcastNet);

// Sets the training flag for a scope and restores the one the module had.
class ModeGuard {
 public:
  ModeGuard(nn::Module &module, bool training) : module_(module), was_training_(module.is_training()) {
    module_.train(training);
  }
  ~ModeGuard() { module_.train(was_training_); }
  ModeGuard(const ModeGuard &) = delete;
  ModeGuard &operator=(const ModeGuard &) = delete;

 private:
  nn::Module &module_;
  bool was_training_;
};

}  // namespace nowcast

namespace verify {

using nowcast::NowcastNet;
using nowcast::RadarSeq;

class Evaluator {
 public:
  explicit Evaluator(NowcastNet net) : net_(std::move(net)) {}
  virtual ~Evaluator() = default;
  virtual std::string name() const = 0;
  // Every score is taken in eval mode and without autograd; training resumes after.
  double run(const std::vector<RadarSeq> &data) {
    net_->eval();
    torch::NoGradGuard no_grad;
    const double score = evaluate(data);
    net_->train();
    return score;
  }

 protected:
  virtual double evaluate(const std::vector<RadarSeq> &data) = 0;
  NowcastNet net_;
};

// Critical success index hits / (hits + misses + false alarms) at 30 dBZ.
class CsiEvaluator : public Evaluator {
 public:
  using Evaluator::Evaluator;
  std::string name() const override { return "CSI@30dBZ"; }

 protected:
  double evaluate(const std::vector<RadarSeq> &data) override {
    auto table = torch::zeros({3}, data.front().future.options());
    const auto threshold = torch::tensor(nowcast::kRainThreshold);
    for (const auto &s : data) {
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): run() switched to eval() and holds the guard.
      auto rain = net_->forward(s.past) > nowcast::kRainThreshold;
      // OK(torch-device-mismatch): a 0-dim CPU threshold next to a device tensor is allowed.
      auto truth = s.future > threshold;
      // OK(torch-loss-accumulation-graph): counts of comparisons carry no graph.
      table += torch::stack({(rain & truth).sum(), (~rain & truth).sum(), (rain & ~truth).sum()}).to(table.dtype());
    }
    // OK(torch-host-sync-in-loop): one copy after the loop, and no training here.
    auto t = table.cpu();
    return t[0].item<double>() / std::max(1.0, t.sum().item<double>());
  }
};

class MaeEvaluator : public Evaluator {
 public:
  using Evaluator::Evaluator;
  std::string name() const override { return "MAE"; }

 protected:
  double evaluate(const std::vector<RadarSeq> &data) override {
    auto err = torch::zeros({}, data.front().future.options());
    for (const auto &s : data)
      // OK(torch-loss-accumulation-graph, torch-inference-without-no-grad, torch-eval-mode-missing): run() holds
      // the no-grad guard and called eval().
      err += (net_->forward(s.past) - s.future).abs().mean();
    // OK(torch-host-sync-in-loop): an evaluation read, once per call.
    return err.item<double>() * 60.0 / static_cast<double>(data.size());
  }
};

}  // namespace verify

struct EpochStats {
  torch::Tensor loss_sum;  // on the training device
  torch::Tensor mse_sum;
  int64_t batches = 0;
};

class Trainer {
 public:
  Trainer(nowcast::NowcastNet net, torch::Device device)
      : net_(std::move(net)), device_(device), opt_(net_->parameters(), torch::optim::AdamWOptions(2e-3)) {}

  EpochStats train_epoch(const std::vector<nowcast::RadarSeq> &data, const nowcast::RadarSeq &probe) {
    EpochStats stats{torch::zeros({}, device_), torch::zeros({}, device_)};
    for (const auto &s : data) {
      opt_.zero_grad();
      // OK(torch-eval-mode-missing): the probe's ModeGuard restored train() at the end of the last epoch.
      auto pred = net_->forward(s.past);
      auto mae = F::l1_loss(pred, s.future);
      auto mse = F::mse_loss(pred, s.future);
      auto loss = mae + 0.5 * mse;
      loss.backward();
      opt_.step();
      // OK(torch-loss-accumulation-graph): detached before it joins the epoch sum.
      stats.loss_sum += loss.detach();
      // BUG(torch-loss-accumulation-graph): the MSE term is summed for the log
      // with its graph; every batch's graph lives until the epoch ends.
      stats.mse_sum += mse;
      if (++stats.batches % 20 == 0)
        // OK(torch-host-sync-in-loop): one read every 20 batches.
        std::cout << "  batch " << stats.batches << " loss " << loss.item<float>() << '\n';
    }
    {
      nowcast::ModeGuard eval_scope(*net_, /*training=*/false);
      torch::NoGradGuard no_grad;
      // OK(torch-eval-mode-missing): the guard switched the net to eval for this scope.
      probe_pred_ = net_->forward(probe.past);
    }
    return stats;
  }
  const torch::Tensor &probe_prediction() const { return probe_pred_; }

 private:
  nowcast::NowcastNet net_;
  torch::Device device_;
  torch::optim::AdamW opt_;
  torch::Tensor probe_pred_;
};

namespace product {

class Blender {
 public:
  explicit Blender(double weight) : weight_(weight), clim_(climatology()) {}
  // Nowcast skill fades with lead time; the blend leans on climatology.
  torch::Tensor blend(const torch::Tensor &pred) const { return weight_ * pred + (1.0 - weight_) * clim_; }
  torch::Tensor anomaly(const torch::Tensor &pred) const { return pred - clim_.to(pred.device()); }

 private:
  // Long-run mean reflectivity of the domain, kept on the host.
  static torch::Tensor climatology() { return torch::full({1, 1, nowcast::kGrid, nowcast::kGrid}, 0.08); }
  double weight_;
  torch::Tensor clim_;
};

torch::Tensor publish(nowcast::NowcastNet &net, const Blender &blender, const nowcast::RadarSeq &latest) {
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): main() called eval(), but the final
  // csi.run() ends with train() on the same module: dropout and batch norm.
  auto pred = net->forward(latest.past);
  // OK(torch-device-mismatch): anomaly() moves the climatology to the prediction's device.
  auto anom = blender.anomaly(pred);
  std::cout << "max anomaly " << anom.max().item<double>() * 60.0 << " dBZ\n";
  return blender.blend(pred);
}

}  // namespace product

int main() {
  torch::manual_seed(296);
  const torch::Device device = nowcast::pick_device();
  auto train = nowcast::synth_storms(60, 16, device);
  auto val = nowcast::synth_storms(8, 32, device);
  auto test = nowcast::synth_storms(8, 32, device);

  nowcast::NowcastNet net;
  net->to(device);
  Trainer trainer(net, device);
  verify::CsiEvaluator csi(net);
  verify::MaeEvaluator mae(net);

  for (int epoch = 0; epoch < 8; ++epoch) {
    EpochStats stats = trainer.train_epoch(train, val.front());
    // OK(torch-host-sync-in-loop): once per epoch, after the batch loop.
    const double mean_loss = stats.loss_sum.item<double>() / static_cast<double>(stats.batches);
    std::cout << "epoch " << epoch << " loss " << mean_loss << ' ' << csi.name() << ' ' << csi.run(val) << ' '
              << mae.name() << ' ' << mae.run(val) << " dBZ\n";
  }
  if (device.is_cuda())
    // OK(torch-empty-cache-in-loop): once, after training is over.
    c10::cuda::CUDACachingAllocator::emptyCache();

  net->eval();
  std::cout << "test " << csi.name() << ' ' << csi.run(test) << '\n';
  product::Blender blender(0.7);
  // BUG(torch-device-mismatch): publish() blends the prediction of `net` on
  // `device` with the blender's CPU climatology: crashes on a GPU node.
  auto map = product::publish(net, blender, test.back());
  std::cout << "product mean " << map.mean().item<double>() * 60.0 << " dBZ, probe mean "
            << trainer.probe_prediction().mean().item<double>() * 60.0 << " dBZ\n";
}
