// Symbolic music generation on MIDI-like event tokens (note-on, note-off,
// time-shift, velocity). Two language models share one templated trainer: a
// small Transformer for the lead line, whose sinusoidal positions are a
// registered buffer, and a GRU groove model for drums, which adds a bar-phase
// table to its embeddings. The trainer sums the loss per track (lead, bass,
// drums) for the epoch report, shows a progress line, and samples with a
// temperature, top-k and an optional mask of events the instrument cannot play.
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace music {

constexpr int64_t kVocab = 388, kCtx = 96, kDim = 128, kTracks = 3, kBos = 0;
constexpr int64_t kVelocityBase = 356, kVelocityBins = 32;

// MIDI velocity of each velocity token, 0..127 in 32 bins.
const torch::Tensor g_velocity_table = torch::linspace(4.0, 127.0, kVelocityBins);

torch::Tensor sinusoid_table(int64_t len, int64_t dim) {
  auto pos = torch::arange(len, torch::kFloat).unsqueeze(1);
  auto freq = torch::exp(torch::arange(0, dim, 2, torch::kFloat) * (-std::log(10000.0) / static_cast<double>(dim)));
  return torch::stack({torch::sin(pos * freq), torch::cos(pos * freq)}, 2).flatten(1);  // len x dim
}

struct EventTransformerImpl : nn::Module {
  explicit EventTransformerImpl(int64_t layers)
      : tok(register_module("tok", nn::Embedding(kVocab, kDim))),
        encoder(register_module("encoder", nn::TransformerEncoder(nn::TransformerEncoderOptions(
                                               nn::TransformerEncoderLayerOptions(kDim, 4).dim_feedforward(256).dropout(0.1), layers)))),
        out(register_module("out", nn::Linear(kDim, kVocab))) {
    pe = register_buffer("pe", sinusoid_table(kCtx, kDim));
  }

  torch::Tensor forward(const torch::Tensor &tokens) {  // B x T -> B x T x V
    const int64_t t = tokens.size(1);
    // OK(torch-device-mismatch): pe is a registered buffer; to(device) moved it with the weights.
    auto h = tok(tokens) + pe.narrow(0, 0, t);
    auto causal = torch::full({t, t}, -1e9, torch::TensorOptions().device(tokens.device())).triu(1);
    h = encoder(h.transpose(0, 1), causal).transpose(0, 1);
    return out(h);
  }

  nn::Embedding tok;
  nn::TransformerEncoder encoder;
  nn::Linear out;
  torch::Tensor pe;
};
TORCH_MODULE(EventTransformer);

struct GrooveNetImpl : nn::Module {
  GrooveNetImpl()
      : tok(register_module("tok", nn::Embedding(kVocab, kDim))),
        gru(register_module("gru", nn::GRU(nn::GRUOptions(kDim, kDim).num_layers(2).batch_first(true)))),
        drop(register_module("drop", nn::Dropout(0.2))),
        out(register_module("out", nn::Linear(kDim, kVocab))),
        bar_phase_(sinusoid_table(kCtx, kDim) * 0.1) {}

  torch::Tensor forward(const torch::Tensor &tokens) {
    const int64_t t = tokens.size(1);
    // BUG(torch-device-mismatch): bar_phase_ is a plain member, not a registered buffer; to(device) left it on the CPU.
    auto h = tok(tokens) + bar_phase_.narrow(0, 0, t);
    return out(drop(std::get<0>(gru->forward(h))));
  }

  nn::Embedding tok;
  nn::GRU gru;
  nn::Dropout drop;
  nn::Linear out;
  torch::Tensor bar_phase_;
};
TORCH_MODULE(GrooveNet);

struct EventBatch {
  torch::Tensor tokens;  // B x (kCtx + 1)
  torch::Tensor track;   // B, which instrument the sequence belongs to
};

EventBatch sample_corpus(int64_t b) {
  auto base = torch::randint(1, 128, {b, 1}, torch::kLong);
  auto walk = torch::randint(-3, 4, {b, kCtx + 1}, torch::kLong).cumsum(1);
  return {(base + walk).remainder(kVocab - 1) + 1, torch::randint(0, kTracks, {b}, torch::kLong)};
}

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)) {}
  void tick(int64_t step, int64_t total, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): the loss tensor is printed on every training step; printing copies it to the host.
    std::cout << '\r' << label_ << ' ' << step + 1 << '/' << total << " loss " << loss << std::flush;
  }
  void done() const { std::cout << '\n'; }

 private:
  std::string label_;
};

struct SamplingConfig {
  double temperature = 1.0;
  int64_t top_k = 16;
  std::optional<torch::Tensor> banned;  // 1 x kVocab bool: events this instrument cannot play
};

template <typename Model>
class LmTrainer {
 public:
  LmTrainer(Model model, torch::Device device, const std::string &name)
      : model_(std::move(model)), device_(device), bar_(name),
        opt_(model_->parameters(), torch::optim::AdamWOptions(3e-4).weight_decay(0.01)) {
    model_->to(device_);
  }

  void fit(int64_t steps, int64_t batch) {
    model_->train();
    std::array<torch::Tensor, kTracks> track_loss;
    for (auto &t : track_loss) t = torch::zeros({}, torch::TensorOptions().device(device_));
    auto epoch_loss = torch::zeros({}, torch::TensorOptions().device(device_));
    for (int64_t s = 0; s < steps; ++s) {
      auto b = sample_corpus(batch);
      auto tokens = b.tokens.to(device_);
      auto track = b.track.to(device_);
      auto inputs = tokens.narrow(1, 0, kCtx), targets = tokens.narrow(1, 1, kCtx);
      opt_.zero_grad();
      auto logits = model_->forward(inputs);
      auto per_seq = F::cross_entropy(logits.reshape({-1, kVocab}), targets.reshape({-1}),
                                      F::CrossEntropyFuncOptions().reduction(torch::kNone))
                         .view({-1, kCtx})
                         .mean(1);
      auto loss = per_seq.mean();
      loss.backward();
      nn::utils::clip_grad_norm_(model_->parameters(), 1.0);
      opt_.step();
      bar_.tick(s, steps, loss);
      // OK(torch-loss-accumulation-graph): detached before it is summed.
      epoch_loss += loss.detach();
      for (int64_t k = 0; k < kTracks; ++k) {
        // BUG(torch-loss-accumulation-graph): the per-track sums keep every step's graph through per_seq.
        track_loss[k] += per_seq.masked_select(track == k).sum();
      }
      // OK(torch-host-sync-in-loop): read every 100 steps only.
      if (s % 100 == 99) std::cout << "\nppl " << std::exp(loss.template item<double>()) << '\n';
    }
    bar_.done();
    std::cout << "epoch loss " << (epoch_loss / static_cast<double>(steps)).item<double>();
    for (int64_t k = 0; k < kTracks; ++k) std::cout << " track" << k << ' ' << track_loss[k].item<double>();
    std::cout << '\n';
  }

  // Returns the generated tokens and the MIDI velocity of each velocity token.
  std::pair<torch::Tensor, torch::Tensor> generate(const SamplingConfig &cfg, int64_t len) {
    torch::NoGradGuard no_grad;
    model_->eval();
    auto seq = torch::full({1, 1}, kBos, torch::TensorOptions().dtype(torch::kLong).device(device_));
    for (int64_t i = 0; i < len; ++i) {
      const int64_t n = seq.size(1);
      auto ctx = seq.narrow(1, std::max<int64_t>(0, n - kCtx), std::min(n, kCtx));
      auto logits = model_->forward(ctx).select(1, -1) / cfg.temperature;  // 1 x V
      if (cfg.banned) {
        // BUG(torch-device-mismatch): the banned-event mask was built on the host in main(); the logits are on 'device_'.
        logits = logits.masked_fill(*cfg.banned, -1e9);
      }
      auto top = logits.topk(cfg.top_k);
      auto pick = torch::multinomial(torch::softmax(std::get<0>(top), -1), 1);
      // OK(torch-device-mismatch): the sampled index and seq are both on 'device_'.
      seq = torch::cat({seq, std::get<1>(top).gather(1, pick)}, 1);
    }
    auto vel_tok = seq.masked_select(seq >= kVelocityBase) - kVelocityBase;
    // BUG(torch-device-mismatch): the velocity table is a namespace-scope CPU tensor; the token indices are on 'device_'.
    auto velocities = g_velocity_table.index_select(0, vel_tok);
    return {seq, velocities};
  }

 private:
  Model model_;
  torch::Device device_;
  ProgressBar bar_;
  torch::optim::AdamW opt_;
};

}  // namespace music

int main() {
  using namespace music;
  torch::manual_seed(389);
  // OK(torch-cuda-unguarded): CUDA only when the runtime reports it.
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);

  LmTrainer<EventTransformer> lead(EventTransformer(2), device, "lead");
  LmTrainer<GrooveNet> drums(GrooveNet(), device, "drums");
  for (int epoch = 0; epoch < 2; ++epoch) {
    lead.fit(300, 16);
    drums.fit(300, 16);
  }

  SamplingConfig lead_cfg;
  lead_cfg.temperature = 0.9;
  SamplingConfig drum_cfg;
  drum_cfg.top_k = 8;
  // Drums play no melodic note-offs: ban events 128..255.
  auto banned = torch::zeros({1, kVocab}, torch::kBool);
  banned.narrow(1, 128, 128).fill_(true);
  drum_cfg.banned = banned;

  auto [lead_seq, lead_vel] = lead.generate(lead_cfg, 256);
  auto [drum_seq, drum_vel] = drums.generate(drum_cfg, 256);
  std::cout << "lead " << lead_seq.size(1) << " events, mean velocity " << lead_vel.to(torch::kFloat).mean().item<double>() << '\n';
  std::cout << "drums " << drum_seq.size(1) << " events, mean velocity " << drum_vel.to(torch::kFloat).mean().item<double>() << '\n';
  return 0;
}
