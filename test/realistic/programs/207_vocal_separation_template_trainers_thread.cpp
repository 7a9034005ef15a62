// Vocal / accompaniment separation on 1 s mono excerpts at 16 kHz. Both
// candidate maskers predict a soft vocal mask over the magnitude of 256-sample
// frames: a temporal conv net with dropout, and a per-frame MLP baseline. One
// trainer template serves both; the winner's stems are exported by a worker
// thread so the main thread can write the report meanwhile.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <thread>
#include <utility>
#include <vector>

constexpr int64_t kFrame = 256, kFrames = 64, kSamples = kFrame * kFrames, kBins = kFrame / 2 + 1;

struct ConvMaskerImpl : torch::nn::Module {
  ConvMaskerImpl()
      : net(register_module("net", torch::nn::Sequential(
                                       torch::nn::Conv1d(torch::nn::Conv1dOptions(kBins, 128, 5).padding(2)),
                                       torch::nn::ReLU(), torch::nn::Dropout(0.2),
                                       torch::nn::Conv1d(torch::nn::Conv1dOptions(128, kBins, 5).padding(2))))) {}
  // magnitude [B, T, F] -> mask [B, T, F]
  torch::Tensor forward(const torch::Tensor &mag) {
    return torch::sigmoid(net->forward(mag.transpose(1, 2))).transpose(1, 2);
  }
  torch::nn::Sequential net;
};
TORCH_MODULE(ConvMasker);

struct FrameMlpMaskerImpl : torch::nn::Module {
  FrameMlpMaskerImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kBins, 256))),
        fc2(register_module("fc2", torch::nn::Linear(256, kBins))) {}
  torch::Tensor forward(const torch::Tensor &mag) { return torch::sigmoid(fc2->forward(torch::relu(fc1->forward(mag)))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(FrameMlpMasker);

struct Excerpt {
  torch::Tensor mixture, vocals;  // [B, kSamples]
};

std::vector<Excerpt> make_excerpts(int64_t n) {
  std::vector<Excerpt> out;
  auto t = torch::arange(kSamples, torch::kFloat).unsqueeze(0) / 16000.0;
  for (int64_t i = 0; i < n; ++i) {
    auto f0 = 110.0 + 220.0 * torch::rand({4, 1});
    auto vocals = 0.5 * torch::sin(2 * M_PI * f0 * t) + 0.2 * torch::sin(4 * M_PI * f0 * t);
    auto accomp = 0.3 * torch::randn({4, kSamples});
    out.push_back({vocals + accomp, vocals});
  }
  return out;
}

// Frame magnitudes [B, T, F] of a batch of waveforms, and the batch's peak level.
std::pair<torch::Tensor, double> magnitude(const torch::Tensor &wave) {
  auto frames = wave.view({wave.size(0), kFrames, kFrame}) * torch::hann_window(kFrame);
  return {torch::fft::rfft(frames).abs(), wave.abs().max().item<double>()};
}

// L1 on magnitudes, plus the batch SNR in dB for the progress bar.
std::pair<torch::Tensor, double> separation_loss(const torch::Tensor &est, const torch::Tensor &ref) {
  auto loss = torch::l1_loss(est, ref);
  auto ratio = ref.pow(2).sum() / (est - ref).pow(2).sum().clamp_min(1e-8);
  // BUG(torch-host-sync-in-loop): called from every training step; the SNR is
  // read back to the host each time.
  const double snr_db = 10.0 * std::log10(ratio.item<double>());
  return {loss, snr_db};
}

void report(const torch::Tensor &loss, double snr_db) {
  static int64_t calls = 0;
  if (++calls % 200 == 0)
    // OK(torch-host-sync-in-loop): every 200th call only.
    std::cout << "step " << calls << " l1 " << loss.item<double>() << " snr " << snr_db << " dB\n";
}

template <typename Model>
class SeparationTrainer {
 public:
  SeparationTrainer(Model model, torch::Device device, double lr)
      : model_(std::move(model)), device_(device), opt_(model_->parameters(), torch::optim::AdamOptions(lr)) {
    model_->to(device_);
  }

  void fit(const std::vector<Excerpt> &data, int epochs) {
    model_->train();
    opt_.zero_grad();
    for (int epoch = 0; epoch < epochs; ++epoch) {
      for (const auto &ex : data) {
        auto [loss, snr_db] = train_step(ex);
        if (!loss.defined())
          continue;
        const double norm = torch::nn::utils::clip_grad_norm_(model_->parameters(), 5.0);
        if (!std::isfinite(norm)) {
          opt_.zero_grad();
          continue;
        }
        // BUG(torch-missing-zero-grad): only the non-finite branch resets the
        // gradients; every regular step applies the sum of all earlier ones.
        opt_.step();
        // BUG(torch-loss-accumulation-graph): train_step returns the loss
        // itself; the history keeps every step's graph alive.
        history_.push_back(loss);
        report(loss, snr_db);
      }
    }
  }

  double evaluate(const std::vector<Excerpt> &data) {
    torch::NoGradGuard no_grad;
    double sdr = 0.0;
    for (const auto &ex : data) {
      auto mix = magnitude(ex.mixture).first.to(device_);
      // BUG(torch-eval-mode-missing): fit() left the model in training mode;
      // the conv masker's dropout is active while it is scored (the frame
      // MLP instantiation has no mode-dependent layer and is fine).
      torch::Tensor est = model_->forward(mix) * mix;
      auto ref = magnitude(ex.vocals).first.to(device_);
      sdr += 10.0 * torch::log10(ref.pow(2).sum() / (est - ref).pow(2).sum().clamp_min(1e-8)).item<double>();
    }
    return sdr / static_cast<double>(data.size());
  }

  // Runs on a worker thread: vocal magnitudes of every excerpt, on the host.
  void export_stems(const std::vector<Excerpt> &data, std::vector<torch::Tensor> *stems) {
    model_->eval();
    for (const auto &ex : data) {
      auto mix = magnitude(ex.mixture).first.to(device_);
      // BUG(torch-inference-without-no-grad): grad mode is thread-local; the
      // guard main() holds does not reach this thread, which records graphs.
      auto mask = model_->forward(mix);
      stems->push_back((mask * mix).cpu());
    }
  }

 private:
  std::pair<torch::Tensor, double> train_step(const Excerpt &ex) {
    auto [mix_mag, peak] = magnitude(ex.mixture);
    if (peak < 1e-4)
      return {torch::Tensor(), 0.0};  // digital silence: nothing to learn
    auto mix = mix_mag.to(device_);
    auto est = model_->forward(mix) * mix;
    // OK(torch-device-mismatch): the target is moved to device_ like the mixture.
    auto target = magnitude(ex.vocals).first.to(device_);
    auto res = separation_loss(est, target);
    res.first.backward();
    return res;
  }

  Model model_;
  torch::Device device_;
  torch::optim::Adam opt_;
  std::vector<torch::Tensor> history_;
};

int main() {
  torch::manual_seed(207);
  // OK(torch-cuda-unguarded): the CUDA device is picked only when available.
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  const auto train_set = make_excerpts(96);
  const auto test_set = make_excerpts(12);

  SeparationTrainer<ConvMasker> conv(ConvMasker(), device, 1e-3);
  SeparationTrainer<FrameMlpMasker> mlp(FrameMlpMasker(), device, 1e-3);
  conv.fit(train_set, 4);
  mlp.fit(train_set, 4);
  const double conv_sdr = conv.evaluate(test_set);
  const double mlp_sdr = mlp.evaluate(test_set);
  std::cout << "SDR conv " << conv_sdr << " dB, mlp " << mlp_sdr << " dB\n";

  std::vector<torch::Tensor> stems;
  {
    torch::NoGradGuard no_grad;
    std::thread worker(&SeparationTrainer<ConvMasker>::export_stems, &conv, std::cref(test_set), &stems);
    std::cout << "writing report while the stems export...\n";
    worker.join();
  }
  std::cout << "exported " << stems.size() << " stems\n";
  return 0;
}
