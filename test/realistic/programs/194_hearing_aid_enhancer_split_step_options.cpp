// Single-channel speech enhancement for a hearing-aid prototype: a small
// convolutional mask estimator over log-magnitude STFT frames (129 bins,
// 64 frames per clip). The trainer takes its hyper-parameters as an options
// struct passed by const&, splits each step into before_step() (forward,
// loss, backward) and after_step() (the accumulated update), and scores the
// validation clips every `eval_every` steps from inside the training loop.
// A per-user adaptation pass fine-tunes on a few clips recorded in the
// fitting session; the demo at the end enhances one clip for the audiologist.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <utility>
#include <vector>

constexpr int64_t kBins = 129, kFrames = 64;

struct EnhanceOptions {
  int64_t hidden = 96;
  int accum_steps = 4;
  int eval_every = 50;
  int max_steps = 400;
  int adapt_steps = 24;
  double lr = 3e-4;
  double adapt_lr = 5e-5;
  double clip_norm = 5.0;
};

// Log-magnitude [B, kBins, T] in, a [0, 1] mask of the same shape out.
struct MaskNetImpl : torch::nn::Module {
  explicit MaskNetImpl(int64_t hidden)
      : conv_in(register_module("conv_in", torch::nn::Conv1d(torch::nn::Conv1dOptions(kBins, hidden, 5).padding(2)))),
        bn(register_module("bn", torch::nn::BatchNorm1d(hidden))),
        drop(register_module("drop", torch::nn::Dropout(0.15))),
        conv_out(register_module("conv_out", torch::nn::Conv1d(torch::nn::Conv1dOptions(hidden, kBins, 5).padding(2)))) {}

  torch::Tensor forward(const torch::Tensor &log_mag) {
    auto h = torch::relu(bn(conv_in(log_mag)));
    return torch::sigmoid(conv_out(drop(h)));
  }

  torch::nn::Conv1d conv_in;
  torch::nn::BatchNorm1d bn;
  torch::nn::Dropout drop;
  torch::nn::Conv1d conv_out;
};
TORCH_MODULE(MaskNet);

struct Clip {
  torch::Tensor noisy, clean;  // log-magnitudes, [B, kBins, kFrames]
};

std::vector<Clip> synth_clips(int64_t count, int64_t batch, torch::Device device) {
  std::vector<Clip> clips;
  clips.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    auto clean = torch::rand({batch, kBins, kFrames}, device);
    auto noise = 0.3 * torch::rand({batch, kBins, kFrames}, device);
    clips.push_back({torch::log1p(clean + noise), torch::log1p(clean)});
  }
  return clips;
}

// Scale-invariant SNR in dB over the linear magnitudes, averaged over the batch.
torch::Tensor si_snr(const torch::Tensor &est, const torch::Tensor &ref) {
  auto e = est.flatten(1), r = ref.flatten(1);
  auto proj = (e * r).sum(1, true) / (r * r).sum(1, true).clamp_min(1e-8) * r;
  auto noise = e - proj;
  return (10.0 * torch::log10((proj * proj).sum(1) / (noise * noise).sum(1).clamp_min(1e-8))).mean();
}

class EnhanceTrainer {
 public:
  EnhanceTrainer(MaskNet model, const EnhanceOptions &opts)
      : model_(std::move(model)), opts_(opts),
        optimizer_(model_->parameters(), torch::optim::AdamOptions(opts.lr).weight_decay(1e-5)) {}

  void fit(const std::vector<Clip> &train, const std::vector<Clip> &valid) {
    model_->train();
    optimizer_.zero_grad();
    for (int step = 0; step < opts_.max_steps; ++step) {
      before_step(train[step % train.size()]);
      after_step();
      if ((step + 1) % opts_.eval_every == 0) {
        // OK(torch-host-sync-in-loop): validation (and its .item()) runs every eval_every steps only.
        double snr = validate(valid);
        std::cout << "step " << step + 1 << "  valid SI-SNR " << snr << " dB\n";
      }
    }
  }

  // Fine-tunes on the user's own clips with a smaller learning rate; the
  // clips come in one at a time, so it accumulates them too.
  void adapt(const std::vector<Clip> &session) {
    torch::optim::SGD sgd(model_->parameters(), torch::optim::SGDOptions(opts_.adapt_lr).momentum(0.9));
    model_->train();
    sgd.zero_grad();
    for (int i = 0; i < opts_.adapt_steps; ++i) {
      const auto &c = session[i % session.size()];
      auto loss = torch::l1_loss(model_->forward(c.noisy) * c.noisy.exp(), c.clean.exp());
      // OK(torch-grad-accumulation-unscaled): divided by the number of accumulated clips.
      (loss / opts_.accum_steps).backward();
      if ((i + 1) % opts_.accum_steps == 0) {
        // OK(torch-missing-zero-grad): reset under the same condition as the step.
        sgd.step();
        sgd.zero_grad();
      }
    }
  }

 private:
  void before_step(const Clip &c) {
    auto mask = model_->forward(c.noisy);
    auto loss = torch::mse_loss(mask * c.noisy.exp(), c.clean.exp());
    // BUG(torch-grad-accumulation-unscaled): after_step() steps once every
    // accum_steps calls, but the mean MSE is never divided by accum_steps.
    loss.backward();
  }

  void after_step() {
    if (++micro_ % opts_.accum_steps != 0)
      return;
    torch::nn::utils::clip_grad_norm_(model_->parameters(), opts_.clip_norm);
    // OK(torch-missing-zero-grad): the reset follows the step on the same path.
    optimizer_.step();
    optimizer_.zero_grad();
  }

  double validate(const std::vector<Clip> &valid) {
    torch::NoGradGuard no_grad;
    model_->eval();
    double total = 0.0;
    for (const auto &c : valid) {
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and a no-grad guard.
      auto est = model_->forward(c.noisy) * c.noisy.exp();
      total += si_snr(est, c.clean.exp()).item<double>();
    }
    model_->train();
    return total / static_cast<double>(valid.size());
  }

  MaskNet model_;
  const EnhanceOptions &opts_;
  torch::optim::Adam optimizer_;
  int64_t micro_ = 0;
};

int main() {
  torch::manual_seed(194);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;

  EnhanceOptions opts;
  opts.max_steps = 200;
  opts.eval_every = 40;

  auto train = synth_clips(64, 16, device);
  auto valid = synth_clips(8, 16, device);
  auto session = synth_clips(6, 1, device);

  MaskNet net(opts.hidden);
  net->to(device);
  EnhanceTrainer trainer(net, opts);
  trainer.fit(train, valid);
  trainer.adapt(session);

  // Demo for the audiologist: the enhanced clip and its SNR gain.
  torch::NoGradGuard no_grad;
  const auto &demo = valid.front();
  // BUG(torch-eval-mode-missing): fit() and adapt() both end in training
  // mode, so the demo runs with dropout on and batch statistics.
  auto mask = net->forward(demo.noisy);
  auto gain = si_snr(mask * demo.noisy.exp(), demo.clean.exp()) - si_snr(demo.noisy.exp(), demo.clean.exp());
  std::cout << "SI-SNR improvement " << gain.item<double>() << " dB\n";
  return 0;
}
