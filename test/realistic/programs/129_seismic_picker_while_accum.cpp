// Picks seismic phases in 3-component waveform windows (noise, P arrival,
// S arrival) with a 1-D conv net with BatchNorm and Dropout. One station's
// GPU fits only 16 windows at a time, so training accumulates
// `AccumConfig::accum` micro-batches per update in a while loop over the
// micro-batch cursor and flushes the last partial group. A synthetic
// pretraining stage runs first, a short station adaptation last, and the
// trained picker then scans a continuous trace with a sliding window.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kSamples = 200;

struct PickerImpl : torch::nn::Module {
  PickerImpl()
      : net(register_module(
            "net", torch::nn::Sequential(torch::nn::Conv1d(torch::nn::Conv1dOptions(3, 16, 7).padding(3)),
                                         torch::nn::BatchNorm1d(16), torch::nn::ReLU(), torch::nn::MaxPool1d(2),
                                         torch::nn::Conv1d(torch::nn::Conv1dOptions(16, 32, 5).padding(2)),
                                         torch::nn::BatchNorm1d(32), torch::nn::ReLU(),
                                         torch::nn::AdaptiveAvgPool1d(1), torch::nn::Flatten(),
                                         torch::nn::Dropout(0.2), torch::nn::Linear(32, 3)))) {}
  torch::Tensor forward(torch::Tensor traces) { return net->forward(traces); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Picker);

struct Waveforms {
  torch::Tensor traces, phases;
  int64_t size() const { return traces.size(0); }
};

struct AccumConfig {
  int64_t micro = 16;
  int64_t accum = 4;
  int epochs = 4;
  int64_t pretrain_steps = 400;
  int64_t log_every = 50;
  double lr = 1e-3;
};

// A wavelet in the middle of the window: on the vertical channel for P, on
// the horizontals for S; nothing for noise.
Waveforms synth_waveforms(int64_t n, double noise, torch::Device device) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto phases = torch::randint(3, {n}, opts.dtype(torch::kLong));
  auto t = torch::arange(kSamples, opts);
  auto wavelet = torch::exp(-((t - kSamples / 2) / 10).pow(2)) * torch::sin(t * 0.8);
  auto gains = torch::tensor({{0.0, 0.0, 0.0}, {1.0, 0.2, 0.2}, {0.2, 1.0, 1.0}}, opts).index_select(0, phases);
  auto traces = gains.unsqueeze(2) * wavelet.view({1, 1, kSamples}) + noise * torch::randn({n, 3, kSamples}, opts);
  return {traces, phases};
}

torch::Tensor pick_loss(Picker &picker, const torch::Tensor &traces, const torch::Tensor &phases) {
  return torch::nn::functional::cross_entropy(picker->forward(traces), phases);
}

// The per-micro-batch share of one update's loss.
torch::Tensor micro_loss(Picker &picker, const Waveforms &data, int64_t i, const AccumConfig &cfg) {
  auto loss = pick_loss(picker, data.traces.narrow(0, i * cfg.micro, cfg.micro),
                        data.phases.narrow(0, i * cfg.micro, cfg.micro));
  return loss / static_cast<double>(cfg.accum);
}

void pretrain(Picker &picker, const AccumConfig &cfg, torch::Device device) {
  picker->train();
  torch::optim::Adam opt(picker->parameters(), torch::optim::AdamOptions(cfg.lr));
  int64_t step = 0;
  while (step < cfg.pretrain_steps) {
    auto batch = synth_waveforms(cfg.micro, 0.8, device);
    auto loss = pick_loss(picker, batch.traces, batch.phases);
    loss.backward();
    // BUG(torch-missing-zero-grad): the reset sits in the logging block, so
    // between two log lines every step re-applies all earlier gradients.
    opt.step();
    if (++step % cfg.log_every == 0) {
      // OK(torch-host-sync-in-loop): only every log_every steps.
      std::cout << "pretrain step " << step << " loss " << loss.item<double>() << '\n';
      opt.zero_grad();
    }
  }
}

void train(Picker &picker, const Waveforms &data, const Waveforms &val, const AccumConfig &cfg) {
  torch::optim::AdamW opt(picker->parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(1e-2));
  auto clear = [&opt] { opt.zero_grad(); };
  auto validate = [&](const Waveforms &split) {
    torch::NoGradGuard no_grad;
    // BUG(torch-eval-mode-missing): called after each epoch's updates while
    // the picker is still in train(): BatchNorm uses the validation batch's
    // statistics (and overwrites its running ones) and Dropout stays on.
    auto pred = picker->forward(split.traces).argmax(1);
    return pred.eq(split.phases).to(torch::kFloat).mean().item<double>();
  };
  const int64_t n = data.size() / cfg.micro;
  for (int epoch = 0; epoch < cfg.epochs; ++epoch) {
    picker->train();
    clear();
    int64_t i = 0;
    while (i < n) {
      auto loss = micro_loss(picker, data, i, cfg);
      // OK(torch-grad-accumulation-unscaled): micro_loss() divides by cfg.accum.
      loss.backward();
      if ((i + 1) % cfg.accum == 0 || i + 1 == n) {
        // OK(torch-missing-zero-grad): the lambda resets under the same condition.
        opt.step();
        clear();
      }
      ++i;
    }
    std::cout << "epoch " << epoch << " val acc " << validate(val) << '\n';
  }
}

// A few minutes of one station's labelled picks, accumulated the same way.
void adapt_station(Picker &picker, const Waveforms &station, const AccumConfig &cfg) {
  picker->train();
  torch::optim::SGD opt(picker->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  opt.zero_grad();
  int64_t cursor = 0, seen = 0;
  while (cursor + cfg.micro <= station.size()) {
    // OK(torch-eval-mode-missing): picker->train() above.
    auto loss = pick_loss(picker, station.traces.narrow(0, cursor, cfg.micro),
                          station.phases.narrow(0, cursor, cfg.micro));
    // BUG(torch-grad-accumulation-unscaled): a mean cross-entropy summed over
    // cfg.accum micro-batches before each step, never divided by it.
    loss.backward();
    cursor += cfg.micro;
    if (++seen % cfg.accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

// Start offsets of the windows that look like a P arrival.
std::vector<int64_t> scan_trace(Picker &picker, const torch::Tensor &trace, int64_t hop) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> picks;
  int64_t start = 0;
  do {
    // OK(torch-eval-mode-missing): main() calls picker->eval() before scanning.
    auto probs = torch::softmax(picker->forward(trace.narrow(1, start, kSamples).unsqueeze(0)), 1);
    if (probs[0][1].item<double>() > 0.8)
      picks.push_back(start);
    start += hop;
  } while (start + kSamples <= trace.size(1));
  return picks;
}

int main() {
  torch::manual_seed(129);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Picker picker;
  picker->to(device);
  AccumConfig cfg;
  pretrain(picker, cfg, device);
  train(picker, synth_waveforms(2048, 0.5, device), synth_waveforms(512, 0.5, device), cfg);
  adapt_station(picker, synth_waveforms(256, 0.9, device), cfg);

  picker->eval();
  auto day = 0.5 * torch::randn({3, 20 * kSamples}, device);
  auto picks = scan_trace(picker, day, kSamples / 4);
  std::cout << picks.size() << " candidate P picks\n";
}
