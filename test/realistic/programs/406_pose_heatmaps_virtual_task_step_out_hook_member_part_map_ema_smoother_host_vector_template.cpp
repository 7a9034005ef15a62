// 2D human pose estimation with heatmap regression (COCO's 17 keypoints): a
// small conv net with batch norm predicts one 16x16 heatmap per joint. The
// loss is computed by a pluggable task object (here the visibility-weighted
// heatmap MSE), micro-batches are accumulated to reach the batch size of the
// paper, and a hook set by main() prints each step. Per-body-part losses and a
// smoothed loss feed the dashboard; validation reports PCK.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace pose {

constexpr int64_t kJoints = 17, kRes = 64, kHm = 16;

// Joint ranges of the COCO layout: face, arms, legs.
const std::map<std::string, std::pair<int64_t, int64_t>> kParts = {{"face", {0, 5}}, {"arms", {5, 6}}, {"legs", {11, 6}}};

struct PoseBatch {
  torch::Tensor images;    // B x 3 x kRes x kRes
  torch::Tensor heatmaps;  // B x kJoints x kHm x kHm
  torch::Tensor visible;   // B x kJoints, 0/1
};

PoseBatch synth_batch(int64_t b) {
  auto xy = torch::randint(2, kHm - 2, {b, kJoints, 2}).to(torch::kFloat);
  auto grid = torch::arange(kHm, torch::kFloat);
  auto dx = (grid.view({1, 1, 1, kHm}) - xy.select(2, 0).view({b, kJoints, 1, 1})).pow(2);
  auto dy = (grid.view({1, 1, kHm, 1}) - xy.select(2, 1).view({b, kJoints, 1, 1})).pow(2);
  auto hm = torch::exp(-(dx + dy) / 2.0);
  auto cue = F::interpolate(hm.sum(1, true), F::InterpolateFuncOptions().size(std::vector<int64_t>{kRes, kRes}));
  auto images = torch::randn({b, 3, kRes, kRes}) * 0.3 + cue;
  return {images, hm, (torch::rand({b, kJoints}) > 0.15).to(torch::kFloat)};
}

struct PoseNetImpl : nn::Module {
  PoseNetImpl()
      : body(register_module("body", nn::Sequential(
                                         nn::Conv2d(nn::Conv2dOptions(3, 32, 3).stride(2).padding(1).bias(false)), nn::BatchNorm2d(32), nn::ReLU(),
                                         nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(2).padding(1).bias(false)), nn::BatchNorm2d(64), nn::ReLU(),
                                         nn::Conv2d(nn::Conv2dOptions(64, 64, 3).padding(1).bias(false)), nn::BatchNorm2d(64), nn::ReLU()))),
        head(register_module("head", nn::Conv2d(nn::Conv2dOptions(64, kJoints, 1)))) {}

  torch::Tensor forward(const torch::Tensor &images) { return head(body->forward(images)); }

  nn::Sequential body;
  nn::Conv2d head;
};
TORCH_MODULE(PoseNet);

struct StepOut {
  torch::Tensor loss;       // scalar
  torch::Tensor per_joint;  // kJoints, squared heatmap error per joint
  torch::Tensor heatmaps;   // B x kJoints x kHm x kHm
};

class PoseTask {
 public:
  virtual ~PoseTask() = default;
  virtual StepOut step(PoseNet &net, const PoseBatch &b) = 0;
};

// Heatmap MSE on the visible joints only.
class HeatmapTask : public PoseTask {
 public:
  StepOut step(PoseNet &net, const PoseBatch &b) override {
    auto pred = net->forward(b.images);
    auto w = b.visible.unsqueeze(-1).unsqueeze(-1);
    auto loss = F::mse_loss(pred * w, b.heatmaps * w);
    return {loss, (pred - b.heatmaps).pow(2).mean({0, 2, 3}), pred};
  }
};

// Copies a small device tensor into a host vector for the dashboard.
template <typename T>
std::vector<T> to_host_vector(const torch::Tensor &t) {
  // BUG(torch-host-sync-in-loop): called on every training step with a tensor on the trainer's device.
  auto host = t.to(torch::kCPU).contiguous();
  return std::vector<T>(host.data_ptr<T>(), host.data_ptr<T>() + host.numel());
}

// Exponential moving average of the training loss, kept on the device.
class LossSmoother {
 public:
  explicit LossSmoother(double beta) : beta_(beta) {}
  void update(const torch::Tensor &loss) {
    if (!ema_.defined()) {
      ema_ = loss.detach();
      return;
    }
    // BUG(torch-loss-accumulation-graph): the trainer passes the live loss; the EMA member chains every step's graph into the next.
    ema_ = beta_ * ema_ + (1.0 - beta_) * loss;
  }
  const torch::Tensor &value() const { return ema_; }

 private:
  double beta_;
  torch::Tensor ema_;
};

bool step_ready(int64_t i, int64_t every) { return (i + 1) % every == 0; }

using StepHook = std::function<void(int64_t, const StepOut &)>;

class PoseTrainer {
 public:
  PoseTrainer(PoseNet net, std::unique_ptr<PoseTask> task, torch::Device device, int64_t accum)
      : net_(std::move(net)), task_(std::move(task)), device_(device), accum_(accum),
        opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)), smoother_(0.98), on_step_([](int64_t, const StepOut &) {}) {
    net_->to(device_);
  }

  void on_step(StepHook hook) { on_step_ = std::move(hook); }

  PoseBatch to_device(const PoseBatch &b) const { return {b.images.to(device_), b.heatmaps.to(device_), b.visible.to(device_)}; }

  double train_epoch(int64_t steps, int64_t batch) {
    net_->train();
    opt_.zero_grad();
    for (const auto &kv : kParts) part_loss_[kv.first] = torch::zeros({}, torch::TensorOptions().device(device_));
    std::vector<torch::Tensor> losses;
    for (int64_t i = 0; i < steps; ++i) {
      auto b = to_device(synth_batch(batch));
      StepOut out = task_->step(net_, b);
      // BUG(torch-grad-accumulation-unscaled): the task's heatmap MSE is a mean and reaches backward() as is; step() waits for 'accum_' micro-batches.
      out.loss.backward();
      if (step_ready(i, accum_)) {
        opt_.step();
        opt_.zero_grad();
      }
      smoother_.update(out.loss);
      for (const auto &[name, range] : kParts) {
        // BUG(torch-loss-accumulation-graph): the per-joint errors come with the step's graph and are summed into the member map for the epoch.
        part_loss_[name] += out.per_joint.narrow(0, range.first, range.second).mean();
      }
      // OK(torch-loss-accumulation-graph): detached before it is kept.
      losses.push_back(out.loss.detach());
      visible_log_.push_back(to_host_vector<float>(b.visible.sum(0)));
      on_step_(i, out);
    }
    for (const auto &kv : part_loss_) std::cout << "  " << kv.first << ' ' << kv.second.item<double>() / static_cast<double>(steps);
    std::cout << "  smoothed " << smoother_.value().item<double>() << '\n';
    // OK(torch-host-sync-in-loop, torch-loss-accumulation-graph): the epoch mean of detached losses is read once, after the loop.
    return torch::stack(losses).mean().item<double>();
  }

  // Percentage of correct keypoints: argmax within one heatmap cell of the target.
  double validate(int64_t batches, int64_t batch) {
    torch::NoGradGuard no_grad;
    net_->eval();
    auto hits = torch::zeros({}, torch::TensorOptions().device(device_));
    auto total_loss = torch::zeros({}, torch::TensorOptions().device(device_));
    for (int64_t v = 0; v < batches; ++v) {
      auto b = to_device(synth_batch(batch));
      StepOut out = task_->step(net_, b);
      // OK(torch-loss-accumulation-graph): the validation step runs under the no-grad guard.
      total_loss += out.loss;
      auto pred_idx = out.heatmaps.flatten(2).argmax(2), gold_idx = b.heatmaps.flatten(2).argmax(2);
      auto close = ((pred_idx % kHm - gold_idx % kHm).abs() <= 1) & ((pred_idx / kHm - gold_idx / kHm).abs() <= 1);
      hits += (close.to(torch::kFloat) * b.visible).sum() / b.visible.sum();
    }
    std::cout << "  val loss " << total_loss.item<double>() / static_cast<double>(batches) << '\n';
    return hits.item<double>() / static_cast<double>(batches);
  }

 private:
  PoseNet net_;
  std::unique_ptr<PoseTask> task_;
  torch::Device device_;
  int64_t accum_;
  torch::optim::Adam opt_;
  LossSmoother smoother_;
  StepHook on_step_;
  std::map<std::string, torch::Tensor> part_loss_;
  std::vector<std::vector<float>> visible_log_;
};

}  // namespace pose

int main() {
  using namespace pose;
  torch::manual_seed(406);
  // OK(torch-cuda-unguarded): CUDA only when the runtime has it.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  PoseTrainer trainer(PoseNet(), std::make_unique<HeatmapTask>(), device, /*accum=*/4);
  trainer.on_step([](int64_t i, const StepOut &s) {
    // BUG(torch-host-sync-in-loop): the trainer runs this hook on every step; the loss is read back to the host each time.
    const double loss = s.loss.item<double>();
    std::cout << "step " << i << " loss " << loss << '\n';
  });
  for (int epoch = 0; epoch < 4; ++epoch) {
    const double loss = trainer.train_epoch(/*steps=*/80, /*batch=*/8);
    const double pck = trainer.validate(/*batches=*/10, /*batch=*/16);
    std::cout << "epoch " << epoch << " train loss " << loss << " PCK@1 " << pck << '\n';
  }
  return 0;
}
