// Letter-level speech recogniser for short voice commands: a log-mel
// frontend on the host, a GRU acoustic model trained with CTC, and greedy CTC
// decoding on the host. The run configuration comes from a static factory
// that reads argv; the trainer tracks a running character error rate, and a
// streaming decoder keeps the last chunk's log-probabilities on the device
// and hands the host its best paths.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

constexpr int64_t kMels = 40;
constexpr int64_t kVocab = 29;  // blank, space, apostrophe, a-z
constexpr int64_t kHop = 160, kWin = 512;
constexpr int64_t kFrames = 100;
constexpr int64_t kSamples = kHop * (kFrames - 1) + kWin;

struct RunConfig {
  torch::Device device;
  int64_t steps;
  int64_t batch;
  std::string checkpoint;

  static RunConfig from_argv(int argc, char **argv) {
    const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 2000;
    const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 16;
    const std::string ckpt = argc > 3 ? argv[3] : "asr_ctc.pt";
    // BUG(torch-cuda-unguarded): the training box always had a GPU, so
    // nothing checks; on a CPU-only runner the first use throws.
    return RunConfig{torch::Device(torch::kCUDA), steps, batch, ckpt};
  }
};

class LogMelFrontend {
 public:
  LogMelFrontend()
      : window_(torch::hann_window(kWin)), basis_(torch::randn({kWin, kWin / 2 + 1}) / 16.0),
        mel_(torch::rand({kWin / 2 + 1, kMels})) {}

  // [B, samples] -> [B, frames, mels], computed on the host.
  torch::Tensor compute(const torch::Tensor &wave) const {
    auto frames = wave.unfold(1, kWin, kHop) * window_;
    auto power = frames.matmul(basis_).pow(2);
    return torch::log(power.matmul(mel_) + 1e-6);
  }

 private:
  torch::Tensor window_, basis_, mel_;
};

struct AcousticModelImpl : torch::nn::Module {
  AcousticModelImpl()
      : proj(register_module("proj", torch::nn::Linear(kMels, 128))),
        gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(128, 128).num_layers(2).batch_first(true)))),
        head(register_module("head", torch::nn::Linear(128, kVocab))) {}
  torch::Tensor forward(const torch::Tensor &feats) {
    auto h = std::get<0>(gru->forward(torch::relu(proj->forward(feats))));
    return head->forward(h);
  }
  torch::nn::Linear proj;
  torch::nn::GRU gru;
  torch::nn::Linear head;
};
TORCH_MODULE(AcousticModel);

// [B, T, V] log-probabilities on the model's device.
torch::Tensor acoustic_logprobs(AcousticModel &model, const torch::Tensor &feats) {
  return model->forward(feats).log_softmax(-1);
}

std::vector<std::string> greedy_collapse(const torch::Tensor &best_host) {
  static const std::string alphabet = "_ 'abcdefghijklmnopqrstuvwxyz";
  auto acc = best_host.accessor<int64_t, 2>();
  std::vector<std::string> out;
  for (int64_t b = 0; b < acc.size(0); ++b) {
    std::string s;
    int64_t prev = 0;
    for (int64_t t = 0; t < acc.size(1); ++t) {
      const int64_t c = acc[b][t];
      if (c != 0 && c != prev)
        s.push_back(alphabet[static_cast<size_t>(c)]);
      prev = c;
    }
    out.push_back(s);
  }
  return out;
}

double char_error_rate(const torch::Tensor &logp, const std::vector<std::string> &refs) {
  // BUG(torch-host-sync-in-loop): the trainer calls this on every step with
  // log-probabilities on the device; the copy back stalls each step.
  auto best = logp.argmax(-1).cpu();
  auto hyps = greedy_collapse(best);
  double errs = 0.0, total = 0.0;
  for (size_t i = 0; i < refs.size(); ++i) {
    const auto n = std::max(hyps[i].size(), refs[i].size());
    for (size_t k = 0; k < n; ++k)
      errs += (k >= hyps[i].size() || k >= refs[i].size() || hyps[i][k] != refs[i][k]) ? 1.0 : 0.0;
    total += static_cast<double>(refs[i].size());
  }
  return errs / std::max(total, 1.0);
}

struct Utterances {
  torch::Tensor wave;     // [B, samples]
  torch::Tensor targets;  // [B, L] letter ids
  std::vector<std::string> text;
};

Utterances synth_batch(int64_t n) {
  static const std::vector<std::string> words = {"go", "stop", "left", "right", "up", "down"};
  Utterances u{torch::randn({n, kSamples}) * 0.1, torch::zeros({n, 5}, torch::kLong), {}};
  for (int64_t i = 0; i < n; ++i) {
    const auto &w = words[static_cast<size_t>(i) % words.size()];
    for (size_t k = 0; k < w.size(); ++k)
      u.targets[i][static_cast<int64_t>(k)] = static_cast<int64_t>(w[k] - 'a' + 3);
    u.text.push_back(w);
  }
  return u;
}

struct HostPaths {
  torch::Tensor best;
  int64_t chunk;
};

class StreamingDecoder {
 public:
  StreamingDecoder(AcousticModel model, torch::Device device) : model_(std::move(model)), device_(device) {}

  void push(const torch::Tensor &feats) {
    torch::NoGradGuard no_grad;
    pending_ = acoustic_logprobs(model_, feats.to(device_));
    ++chunk_;
  }

  HostPaths fetch_async() const {
    return HostPaths{pending_.argmax(-1).to(torch::kCPU, /*non_blocking=*/true), chunk_};
  }

 private:
  AcousticModel model_;
  torch::Device device_;
  torch::Tensor pending_;
  int64_t chunk_ = 0;
};

void save_posteriors(torch::Tensor logp, const std::string &path) {
  // BUG(torch-tensor-to-discarded): cpu() returns a copy; the archive below
  // still gets the device tensor.
  logp.cpu();
  torch::save(logp, path);
}

int main(int argc, char **argv) {
  const RunConfig cfg = RunConfig::from_argv(argc, argv);
  LogMelFrontend frontend;
  AcousticModel model;
  model->to(cfg.device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(3e-4));

  double running_cer = 1.0;
  model->train();
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto utt = synth_batch(cfg.batch);
    // OK(torch-device-mismatch): the features follow the model to cfg.device.
    auto logp = acoustic_logprobs(model, frontend.compute(utt.wave).to(cfg.device));
    auto input_lens = torch::full({cfg.batch}, kFrames, torch::kLong);
    auto target_lens = (utt.targets > 0).sum(1);
    auto loss = torch::nn::functional::ctc_loss(logp.transpose(0, 1), utt.targets, input_lens, target_lens,
                                                torch::nn::functional::CTCLossFuncOptions().zero_infinity(true));
    opt.zero_grad();
    loss.backward();
    opt.step();
    running_cer = 0.95 * running_cer + 0.05 * char_error_rate(logp.detach(), utt.text);
    if (step % 100 == 0)
      // OK(torch-host-sync-in-loop): printed on logging steps only.
      std::cout << "step " << step << " ctc " << loss.item<double>() << " cer~" << running_cer << "\n";
  }
  torch::save(model, cfg.checkpoint);

  model->eval();
  {
    torch::NoGradGuard no_grad;
    auto utt = synth_batch(4);
    // BUG(torch-device-mismatch): compute() returns host features and the
    // helper feeds them to a model that lives on cfg.device.
    auto logp = acoustic_logprobs(model, frontend.compute(utt.wave));
    save_posteriors(logp, "posteriors.pt");
  }

  StreamingDecoder decoder(model, cfg.device);
  auto live = synth_batch(2);
  decoder.push(frontend.compute(live.wave));
  auto paths = decoder.fetch_async();
  // BUG(torch-non-blocking-d2h-race): fetch_async() only started the copy of
  // the device argmax; the collapse reads it with nothing waited for.
  auto hyps = greedy_collapse(paths.best);
  std::cout << "chunk " << paths.chunk << ": " << hyps.front() << "\n";

  decoder.push(frontend.compute(synth_batch(2).wave));
  auto next = decoder.fetch_async();
  torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): the device was synchronised first.
  auto hyps2 = greedy_collapse(next.best);
  std::cout << "chunk " << next.chunk << ": " << hyps2.front() << "\n";
  return 0;
}
