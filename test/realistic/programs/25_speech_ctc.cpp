// A small CTC speech recogniser: log-mel-like features computed on the host,
// uploaded into a preallocated device buffer, a BiLSTM acoustic model, and a
// greedy CTC decoder. Written for the lab's GPU servers.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

struct AsrConfig {
  int64_t mels = 80;
  int64_t frames = 400;
  int64_t batch = 16;
  int64_t vocab = 32;  // blank = 0
  int64_t steps = 300;
};

torch::Tensor compute_features(const AsrConfig &cfg) {
  auto power = torch::rand({cfg.batch, cfg.frames, cfg.mels});
  return torch::log(power + 1e-6);
}

struct AcousticImpl : torch::nn::Module {
  explicit AcousticImpl(const AsrConfig &cfg)
      : lstm(register_module("lstm", torch::nn::LSTM(torch::nn::LSTMOptions(cfg.mels, 128).num_layers(2).batch_first(true).bidirectional(true)))),
        out(register_module("out", torch::nn::Linear(256, cfg.vocab))) {}
  torch::Tensor forward(torch::Tensor feats) {
    return torch::log_softmax(out(std::get<0>(lstm->forward(feats))), -1);
  }
  torch::nn::LSTM lstm;
  torch::nn::Linear out;
};
TORCH_MODULE(Acoustic);

std::vector<std::vector<int64_t>> greedy_decode(const torch::Tensor &best) {
  std::vector<std::vector<int64_t>> out;
  auto a = best.accessor<int64_t, 2>();
  for (int64_t b = 0; b < a.size(0); ++b) {
    std::vector<int64_t> seq;
    int64_t prev = 0;
    for (int64_t t = 0; t < a.size(1); ++t) {
      if (a[b][t] != 0 && a[b][t] != prev)
        seq.push_back(a[b][t]);
      prev = a[b][t];
    }
    out.push_back(seq);
  }
  return out;
}

torch::Tensor transcribe(Acoustic &model, const torch::Tensor &feats) {
  torch::NoGradGuard no_grad;
  return model->forward(feats).argmax(-1);
}

int main() {
  if (torch::cuda::is_available())
    std::cout << "found " << torch::cuda::device_count() << " GPU(s)\n";
  AsrConfig cfg;
  Acoustic model(cfg);
  // BUG(torch-cuda-unguarded): the availability check above only prints; this
  // path reaches CUDA on a machine without it.
  model->to(torch::kCUDA);
  torch::Device device = model->out->weight.device();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::nn::CTCLoss ctc;

  auto device_feats = torch::empty({cfg.batch, cfg.frames, cfg.mels}, torch::TensorOptions().device(device));
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto host_feats = compute_features(cfg);
    // BUG(torch-non-blocking-pageable): compute_features() returns pageable
    // host memory; this non-blocking copy_ is synchronous.
    device_feats.copy_(host_feats, /*non_blocking=*/true);
    auto log_probs = model->forward(device_feats).transpose(0, 1);  // [T, B, V]
    auto targets = torch::randint(1, cfg.vocab, {cfg.batch, 50}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto input_lengths = torch::full({cfg.batch}, cfg.frames, torch::kLong);
    auto target_lengths = torch::full({cfg.batch}, 50, torch::kLong);
    // OK(torch-device-mismatch): CTCLoss has no parameters, and it takes the
    // lengths on the host.
    auto loss = ctc(log_probs, targets, input_lengths, target_lengths);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }

  auto eval_feats = compute_features(cfg).to(device);
  torch::Tensor best;
  try {
    best = transcribe(model, eval_feats);
  } catch (const std::exception &e) {
    if (std::string(e.what()).find("out of memory") == std::string::npos)
      throw;
    // BUG(torch-empty-cache-oom-retry): transcribe() is retried with the
    // same features; emptying the cache changes nothing.
    c10::cuda::CUDACachingAllocator::emptyCache();
    best = transcribe(model, eval_feats);
  }
  auto host_best = best.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): greedy_decode() walks the host copy
  // before anything waited for it.
  auto hyps = greedy_decode(host_best);
  std::cout << hyps.size() << " hypotheses, first of length " << hyps.front().size() << '\n';
  return 0;
}
