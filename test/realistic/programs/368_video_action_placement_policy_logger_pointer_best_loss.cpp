// Video action recognition: a small (2+1)D convolutional network classifies
// 16-frame clips into action classes. A Placement policy object decides where
// the network and its inputs live; the trainer reports every step to a Logger
// it holds by pointer and keeps the best loss it has seen; validation counts
// top-1 hits on the device and reads them once per epoch; test-time
// augmentation averages three temporal crops and applies a class prior.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace action {

constexpr int64_t kFrames = 16, kSide = 48, kClasses = 10;

struct R2Plus1dImpl : nn::Module {
  explicit R2Plus1dImpl(double p)
      : spatial(register_module("spatial", nn::Conv3d(nn::Conv3dOptions(3, 24, {1, 3, 3}).stride({1, 2, 2}).padding({0, 1, 1})))),
        temporal(register_module("temporal", nn::Conv3d(nn::Conv3dOptions(24, 48, {3, 1, 1}).padding({1, 0, 0})))),
        bn(register_module("bn", nn::BatchNorm3d(48))),
        drop(register_module("drop", nn::Dropout(p))),
        head(register_module("head", nn::Linear(48, kClasses))) {}

  torch::Tensor forward(const torch::Tensor &clip) {  // B x 3 x T x H x W
    auto h = torch::relu(bn->forward(temporal->forward(torch::relu(spatial->forward(clip)))));
    h = F::adaptive_avg_pool3d(h, F::AdaptiveAvgPool3dFuncOptions(1)).flatten(1);
    return head->forward(drop->forward(h));
  }

  nn::Conv3d spatial, temporal;
  nn::BatchNorm3d bn;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(R2Plus1d);

struct ClipBatch {
  torch::Tensor clips;   // B x 3 x T x H x W
  torch::Tensor labels;  // B
};

ClipBatch synth_clips(int64_t b, int64_t frames = kFrames) {
  auto labels = torch::randint(0, kClasses, {b}, torch::kLong);
  auto speed = labels.to(torch::kFloat).view({b, 1, 1, 1, 1}) / kClasses;
  auto t = torch::arange(frames, torch::kFloat).view({1, 1, frames, 1, 1});
  auto clips = torch::randn({b, 3, frames, kSide, kSide}) * 0.5 + torch::sin(t * speed * 3.0);
  return {clips, labels};
}

// Decides where the network and its inputs live.
class Placement {
 public:
  explicit Placement(torch::Device device) : device_(device) {}
  void place(nn::Module &module) const { module.to(device_); }
  torch::Tensor place(const torch::Tensor &t) const { return t.to(device_); }
  const torch::Device &device() const { return device_; }

 private:
  torch::Device device_;
};

class Logger {
 public:
  explicit Logger(std::string tag) : tag_(std::move(tag)) {}
  void log(const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): the trainer calls log() through its pointer on every step; each call reads the loss on the host.
    history_.push_back(loss.item<double>());
  }
  void flush(int64_t epoch) const {
    double sum = 0.0;
    for (double v : history_) sum += v;
    std::cout << tag_ << " epoch " << epoch << " mean loss " << sum / static_cast<double>(history_.empty() ? 1 : history_.size()) << '\n';
  }

 private:
  std::string tag_;
  std::vector<double> history_;
};

class Trainer {
 public:
  Trainer(R2Plus1d net, Placement placement, Logger *logger)
      : net_(std::move(net)), placement_(std::move(placement)), logger_(logger),
        opt_(net_->parameters(), torch::optim::AdamWOptions(3e-4).weight_decay(1e-4)) {
    placement_.place(*net_);
  }

  void train_epoch(int64_t steps, int64_t batch) {
    net_->train();
    // OK(torch-host-sync-in-loop, torch-loss-accumulation-graph): detached losses summed on the device, read once after the loop.
    auto epoch_loss = torch::zeros({}, torch::TensorOptions().device(placement_.device()));
    for (int64_t s = 0; s < steps; ++s) {
      auto b = synth_clips(batch);
      auto clips = placement_.place(b.clips);
      auto labels = placement_.place(b.labels);
      opt_.zero_grad();
      // OK(torch-device-mismatch): both the clips and the labels went through the policy.
      auto loss = F::cross_entropy(net_->forward(clips), labels);
      loss.backward();
      opt_.step();
      logger_->log(loss);
      epoch_loss += loss.detach();
      // BUG(torch-host-sync-in-loop): the comparison with the best loss reads the loss on every step.
      if (loss.item<float>() < best_loss_) {
        best_loss_ = loss.item<float>();
        best_step_ = total_steps_;
      }
      ++total_steps_;
      if (s % 25 == 0) std::cout << "step " << s << '\n';
    }
    std::cout << "epoch loss " << (epoch_loss / static_cast<double>(steps)).item<double>() << '\n';
  }

  double validate(const std::vector<ClipBatch> &val) {
    torch::NoGradGuard no_grad;
    net_->eval();
    auto hits = torch::zeros({}, torch::TensorOptions().dtype(torch::kLong).device(placement_.device()));
    int64_t seen = 0;
    for (const auto &b : val) {
      auto pred = net_->forward(placement_.place(b.clips)).argmax(1);
      // BUG(torch-device-mismatch): the policy placed the clips but nobody placed the labels; eq() meets a CPU tensor.
      hits += pred.eq(b.labels).sum();
      seen += b.labels.size(0);
    }
    // OK(torch-host-sync-in-loop): read once, after the validation loop.
    return static_cast<double>(hits.item<int64_t>()) / static_cast<double>(seen);
  }

  R2Plus1d &net() { return net_; }
  const Placement &placement() const { return placement_; }
  float best_loss() const { return best_loss_; }

 private:
  R2Plus1d net_;
  Placement placement_;
  Logger *logger_;
  torch::optim::AdamW opt_;
  float best_loss_ = std::numeric_limits<float>::infinity();
  int64_t best_step_ = 0, total_steps_ = 0;
};

// Loader settings; clips are decoded and normalised on the host.
struct DataConfig {
  int64_t batch = 8;
  Placement staging{torch::Device(torch::kCPU)};
};

// One forward on a fresh clip before training starts: logits must not be constant.
double sanity_check(Trainer &trainer, const DataConfig &cfg) {
  torch::NoGradGuard no_grad;
  trainer.net()->eval();
  auto b = synth_clips(cfg.batch);
  // BUG(torch-device-mismatch): the clip was placed by the loader's host-side policy, not by the trainer's; the net lives on 'device'.
  auto logits = trainer.net()->forward(cfg.staging.place(b.clips));
  return logits.std().item<double>();
}

// Three temporal crops of a long clip, averaged, then reweighted by a class prior.
class TtaScorer {
 public:
  TtaScorer(R2Plus1d net, const Placement &placement)
      : net_(std::move(net)), placement_(placement), log_prior_(torch::log_softmax(torch::linspace(0.0, 1.0, kClasses), 0)) {}

  torch::Tensor score(const torch::Tensor &long_clip) {
    torch::NoGradGuard no_grad;
    net_->eval();
    const int64_t t = long_clip.size(2);
    std::vector<torch::Tensor> logits;
    for (int64_t start : {int64_t{0}, (t - kFrames) / 2, t - kFrames}) {
      // OK(torch-device-mismatch): every crop goes through the policy before the forward.
      logits.push_back(net_->forward(placement_.place(long_clip.narrow(2, start, kFrames))));
    }
    auto mean_logits = torch::stack(logits).mean(0);
    // BUG(torch-device-mismatch): the class prior was built on the CPU in the constructor and never placed.
    return torch::log_softmax(mean_logits, 1) + log_prior_;
  }

 private:
  R2Plus1d net_;
  Placement placement_;
  torch::Tensor log_prior_;
};

// Embeddings of a clip bank for retrieval, computed in evaluation mode.
std::vector<torch::Tensor> embed_bank(R2Plus1d &net, const Placement &placement, int64_t clips) {
  std::vector<torch::Tensor> bank;
  net->eval();
  for (int64_t i = 0; i < clips; ++i) {
    auto b = synth_clips(1);
    // BUG(torch-inference-without-no-grad): a retrieval bank is built with autograd recording every forward.
    auto logits = net->forward(placement.place(b.clips));
    bank.push_back(logits.detach());
  }
  return bank;
}

}  // namespace action

int main() {
  using namespace action;
  torch::manual_seed(368);
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports it.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Logger logger("r2plus1d");
  R2Plus1d net(0.3);
  Trainer trainer(net, Placement{device}, &logger);

  std::vector<ClipBatch> val;
  for (int i = 0; i < 4; ++i) val.push_back(synth_clips(8));
  DataConfig data;
  std::cout << "sanity logit std " << sanity_check(trainer, data) << '\n';

  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    trainer.train_epoch(40, 8);
    logger.flush(epoch);
    std::cout << "val top-1 " << trainer.validate(val) << " best " << trainer.best_loss() << '\n';
  }

  TtaScorer tta(trainer.net(), trainer.placement());
  auto long_clip = synth_clips(2, 32).clips;
  std::cout << "tta scores " << tta.score(long_clip).exp().sum(1) << '\n';

  auto bank = embed_bank(trainer.net(), trainer.placement(), 16);
  std::cout << "bank " << bank.size() << " x " << bank.front().size(1) << '\n';
  return 0;
}
