// Metric learning against fixed class anchors, with gradient accumulation:
// the micro-batch counter, the number of optimizer updates and the running
// loss live in an AccumState struct inside the trainer. The anchors are kept
// per class in a host-side hash map (they come from a feature store in the
// real service). The epoch driver is a template over the optimizer type, and
// an early-stopping helper watches the validation loss.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <limits>
#include <unordered_map>

constexpr int64_t kIn = 24;
constexpr int64_t kDim = 16;
constexpr int64_t kClasses = 10;

struct EncoderImpl : torch::nn::Module {
  EncoderImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kIn, 64))),
        bn(register_module("bn", torch::nn::BatchNorm1d(64))),
        fc2(register_module("fc2", torch::nn::Linear(64, kDim))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Encoder);

struct AccumState {
  int64_t micro = 0;
  int64_t updates = 0;
  torch::Tensor loss_sum;
};

class AnchorTrainer {
 public:
  AnchorTrainer(torch::Device device, int64_t accum) : device_(device), accum_(accum) {
    encoder_->to(device_);
    for (int64_t c = 0; c < kClasses; ++c)
      anchors_[c] = torch::randn({kDim}) * 3.0;
    state_.loss_sum = torch::zeros({}, device_);
  }

  Encoder &encoder() { return encoder_; }

  template <typename Opt>
  void fit_epoch(Opt &opt, int64_t micro_batches) {
    encoder_->train();
    opt.zero_grad();
    state_.micro = 0;
    for (int64_t i = 0; i < micro_batches; ++i) {
      const int64_t cls = i % kClasses;
      auto x = (torch::randn({32, kIn}) + static_cast<double>(cls)).to(device_);
      // BUG(torch-non-blocking-pageable): every anchor in anchors_ was made by
      // torch::randn in the constructor, in pageable memory.
      auto anchor = anchors_.at(cls).to(device_, /*non_blocking=*/true);
      auto emb = encoder_->forward(x);
      auto loss = (emb - anchor).pow(2).sum(1).mean() / static_cast<double>(accum_);
      loss.backward();
      // BUG(torch-loss-accumulation-graph): state_ outlives the micro-batch;
      // its running sum keeps every micro-batch's graph until the epoch ends.
      state_.loss_sum += loss;
      if (++state_.micro % accum_ == 0) {
        opt.step();
        opt.zero_grad();
        ++state_.updates;
        // BUG(torch-empty-cache-in-loop): runs after every accumulated update;
        // the next micro-batch has to cudaMalloc the activations again.
        c10::cuda::CUDACachingAllocator::emptyCache();
      }
    }
    std::cout << "epoch updates " << state_.updates << " loss "
              << state_.loss_sum.item<double>() * static_cast<double>(accum_) / static_cast<double>(micro_batches)
              << '\n';
    state_.loss_sum = torch::zeros({}, device_);
  }

  torch::Tensor validation_loss(int64_t batches) {
    torch::NoGradGuard no_grad;
    encoder_->eval();
    auto total = torch::zeros({}, device_);
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t cls = b % kClasses;
      auto x = (torch::randn({128, kIn}) + static_cast<double>(cls)).to(device_);
      auto anchor = anchors_.at(cls).to(device_);
      // OK(torch-inference-without-no-grad): the NoGradGuard above covers the loop.
      auto emb = encoder_->forward(x);
      // OK(torch-loss-accumulation-graph): computed without autograd.
      total += (emb - anchor).pow(2).sum(1).mean();
    }
    encoder_->train();
    return total / static_cast<double>(batches);
  }

 private:
  torch::Device device_;
  int64_t accum_;
  Encoder encoder_;
  AccumState state_;
  std::unordered_map<int64_t, torch::Tensor> anchors_;
};

class EarlyStopping {
 public:
  explicit EarlyStopping(int64_t patience) : patience_(patience) {}
  bool should_stop(const torch::Tensor &val_loss) {
    // OK(torch-host-sync-in-loop): one read per epoch; the batch loop that
    // trains is inside fit_epoch().
    const double v = val_loss.item<double>();
    if (v < best_ - 1e-4) {
      best_ = v;
      bad_epochs_ = 0;
    } else {
      ++bad_epochs_;
    }
    return bad_epochs_ >= patience_;
  }
  double best() const { return best_; }

 private:
  int64_t patience_;
  int64_t bad_epochs_ = 0;
  double best_ = std::numeric_limits<double>::infinity();
};

int main() {
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  AnchorTrainer trainer(device, /*accum=*/4);

  // A short SGD warm start, then Adam.
  torch::optim::SGD warm(trainer.encoder()->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  trainer.fit_epoch(warm, 40);

  torch::optim::Adam opt(trainer.encoder()->parameters(), torch::optim::AdamOptions(5e-4));
  EarlyStopping stopper(3);
  for (int64_t epoch = 0; epoch < 50; ++epoch) {
    trainer.fit_epoch(opt, 200);
    auto val = trainer.validation_loss(10);
    if (stopper.should_stop(val)) {
      std::cout << "stopping at epoch " << epoch << " best " << stopper.best() << '\n';
      break;
    }
  }
  return 0;
}
