// Single-lead ECG beat models (250-sample windows at 360 Hz). Signal
// plug-ins (baseline removal, amplitude jitter, a memory trim the cluster
// admins asked for) register themselves at static-initialisation time into a
// registry of std::function<torch::Tensor(torch::Tensor)>, and every batch
// runs through all of them. Two trainers share a CRTP base that owns the step
// loop with gradient accumulation: a beat classifier (5 AAMI classes) and a
// denoising autoencoder; the derived classes supply the batches, the loss and
// a per-step hook.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

constexpr int64_t kWindow = 250, kBeatClasses = 5;

using Plugin = std::function<torch::Tensor(torch::Tensor)>;

std::vector<std::pair<std::string, Plugin>> &plugin_registry() {
  static std::vector<std::pair<std::string, Plugin>> registry;
  return registry;
}

struct PluginRegistrar {
  PluginRegistrar(const char *name, Plugin fn) { plugin_registry().emplace_back(name, std::move(fn)); }
};
#define REGISTER_ECG_PLUGIN(name, fn) static const PluginRegistrar registrar_##name(#name, fn)

REGISTER_ECG_PLUGIN(baseline_removal, [](torch::Tensor x) { return x - x.mean(-1, /*keepdim=*/true); });
REGISTER_ECG_PLUGIN(amplitude_jitter, [](torch::Tensor x) {
  return x * (1.0 + 0.05 * torch::randn({x.size(0), 1, 1}, x.options()));
});
REGISTER_ECG_PLUGIN(memory_trim, [](torch::Tensor x) {
  // BUG(torch-empty-cache-in-loop): TrainerBase::fit() runs every registered
  // plug-in on every micro-batch.
  c10::cuda::CUDACachingAllocator::emptyCache();
  return x;
});

struct BeatNetImpl : torch::nn::Module {
  BeatNetImpl()
      : conv(register_module("conv", torch::nn::Conv1d(torch::nn::Conv1dOptions(1, 32, 7).padding(3)))),
        bn(register_module("bn", torch::nn::BatchNorm1d(32))),
        fc(register_module("fc", torch::nn::Linear(32, kBeatClasses))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc(torch::relu(bn(conv(x))).amax(2));
  }
  torch::nn::Conv1d conv;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear fc;
};
TORCH_MODULE(BeatNet);

struct DenoiserImpl : torch::nn::Module {
  DenoiserImpl()
      : enc(register_module("enc", torch::nn::Linear(kWindow, 64))),
        drop(register_module("drop", torch::nn::Dropout(0.1))),
        dec(register_module("dec", torch::nn::Linear(64, kWindow))) {}
  torch::Tensor forward(torch::Tensor x) { return dec(drop(torch::tanh(enc(x.squeeze(1))))).unsqueeze(1); }
  torch::nn::Linear enc;
  torch::nn::Dropout drop;
  torch::nn::Linear dec;
};
TORCH_MODULE(Denoiser);

struct EcgBatch {
  torch::Tensor x;  // [B, 1, 250]
  torch::Tensor y;  // labels [B] or clean beats [B, 1, 250]
};

template <class Derived> class TrainerBase {
 public:
  void fit(int64_t micro_batches) {
    auto &self = static_cast<Derived &>(*this);
    self.model()->train();
    self.optimizer().zero_grad();
    for (int64_t i = 0; i < micro_batches; ++i) {
      EcgBatch batch = self.next_batch();
      for (const auto &entry : plugin_registry())
        batch.x = entry.second(batch.x);
      torch::Tensor loss = self.compute_loss(batch);
      // BUG(torch-grad-accumulation-unscaled): BeatTrainer accumulates 4
      // micro-batches of a mean cross-entropy and never divides it.
      loss.backward();
      if ((i + 1) % Derived::kAccumulate == 0) {
        self.optimizer().step();
        // OK(torch-missing-zero-grad): reset right after the step, under the
        // same condition.
        self.optimizer().zero_grad();
      }
      self.on_step_end(i, loss);
    }
  }
};

class BeatTrainer : public TrainerBase<BeatTrainer> {
 public:
  static constexpr int64_t kAccumulate = 4;
  explicit BeatTrainer(torch::Device device)
      : device_(device), opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)) {
    net_->to(device_);
  }
  BeatNet &model() { return net_; }
  torch::optim::Adam &optimizer() { return opt_; }
  EcgBatch next_batch() {
    auto y = torch::randint(kBeatClasses, {32}, torch::kLong);
    auto t = torch::linspace(0, 1, kWindow).view({1, 1, kWindow});
    auto x = torch::sin(6.28 * t * (y.to(torch::kFloat).view({32, 1, 1}) + 1.0)) + 0.1 * torch::randn({32, 1, kWindow});
    return {x.to(device_), y.to(device_)};
  }
  torch::Tensor compute_loss(const EcgBatch &b) {
    return torch::nn::functional::cross_entropy(net_->forward(b.x), b.y);
  }
  void on_step_end(int64_t, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): fit() calls this hook after every
    // micro-batch; item() waits for the GPU each time.
    curve_.push_back(loss.item<double>());
  }
  torch::Tensor predict(const torch::Tensor &x) {
    torch::NoGradGuard no_grad;
    net_->eval();
    // OK(torch-eval-mode-missing): eval() right above.
    return torch::softmax(net_->forward(x.to(device_)), 1);
  }
  const std::vector<double> &curve() const { return curve_; }

 private:
  torch::Device device_;
  BeatNet net_;
  torch::optim::Adam opt_;
  std::vector<double> curve_;
};

class DenoiseTrainer : public TrainerBase<DenoiseTrainer> {
 public:
  static constexpr int64_t kAccumulate = 1;
  explicit DenoiseTrainer(torch::Device device)
      : device_(device), opt_(net_->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)) {
    net_->to(device_);
    recon_sum_ = torch::zeros({}, torch::TensorOptions().device(device_));
  }
  Denoiser &model() { return net_; }
  torch::optim::SGD &optimizer() { return opt_; }
  EcgBatch next_batch() {
    auto clean = torch::sin(torch::linspace(0, 12.56, kWindow)).view({1, 1, kWindow}).repeat({32, 1, 1});
    return {(clean + 0.2 * torch::randn({32, 1, kWindow})).to(device_), clean.to(device_)};
  }
  torch::Tensor compute_loss(const EcgBatch &b) {
    auto loss = torch::mse_loss(net_->forward(b.x), b.y);
    // BUG(torch-loss-accumulation-graph): recon_sum_ is a member that lives
    // for the whole run; each step's graph stays attached to it.
    recon_sum_ += loss;
    return loss;
  }
  void on_step_end(int64_t step, const torch::Tensor &loss) {
    if (step % 200 == 0)
      // OK(torch-host-sync-in-loop): every 200 steps only.
      std::cout << "denoiser step " << step << " mse " << loss.item<double>() << '\n';
  }
  double mean_recon(int64_t steps) const { return recon_sum_.item<double>() / static_cast<double>(steps); }

 private:
  torch::Device device_;
  Denoiser net_;
  torch::optim::SGD opt_;
  torch::Tensor recon_sum_;
};

int main() {
  torch::manual_seed(148);
  // OK(torch-cuda-unguarded): CPU fallback.
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  // OK(torch-device-index-unchecked): the second card only when there is one.
  torch::Device denoise_device = torch::cuda::device_count() > 1 ? torch::Device("cuda:1") : device;

  BeatTrainer beats(device);
  beats.fit(2000);
  DenoiseTrainer denoiser(denoise_device);
  denoiser.fit(1000);
  std::cout << "beat loss " << beats.curve().back() << ", denoiser mse " << denoiser.mean_recon(1000) << '\n';

  auto probe = torch::sin(torch::linspace(0, 6.28 * 3, kWindow)).view({1, 1, kWindow});
  auto probs = beats.predict(probe).to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): the class probabilities are read while
  // the copy to the host may still be in flight.
  if (probs[0][0].item<float>() > 0.5f)
    std::cout << "normal beat\n";
  return 0;
}
