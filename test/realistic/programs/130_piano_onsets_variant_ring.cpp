// Piano transcription: a frame-wise onset detector maps log-mel frames
// [B, T, 229] to per-key onset logits [B, T, 88]. The architecture comes
// from a std::variant of configs (a wide feed-forward stack or a "stacked"
// one) visited with std::visit inside a static factory that also places the
// model. The training log keeps the last 32 losses in a std::deque ring
// buffer; silent excerpts are skipped with an early `continue`.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <iostream>
#include <memory>
#include <type_traits>
#include <variant>
#include <vector>

constexpr int64_t kBins = 229, kKeys = 88, kFrames = 64;

struct WideConfig {
  int64_t width;
  double dropout;
};
struct StackedConfig {
  int64_t width_per_layer;
  int64_t layers;
};
using OnsetConfig = std::variant<WideConfig, StackedConfig>;

struct OnsetNetImpl : torch::nn::Module {
  OnsetNetImpl(int64_t width, double dropout)
      : proj(register_module("proj", torch::nn::Linear(kBins, width))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})))),
        drop(register_module("drop", torch::nn::Dropout(dropout))),
        head(register_module("head", torch::nn::Linear(width, kKeys))) {}

  torch::Tensor forward(torch::Tensor frames) { return head(drop(torch::relu(norm(proj(frames))))); }

  // Builds the variant's architecture and places it on `device`.
  static std::shared_ptr<OnsetNetImpl> build_on(const OnsetConfig &config, torch::Device device);

  torch::nn::Linear proj;
  torch::nn::LayerNorm norm;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
};

std::shared_ptr<OnsetNetImpl> OnsetNetImpl::build_on(const OnsetConfig &config, torch::Device device) {
  auto net = std::visit(
      [](const auto &c) -> std::shared_ptr<OnsetNetImpl> {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, WideConfig>)
          return std::make_shared<OnsetNetImpl>(c.width, c.dropout);
        else
          return std::make_shared<OnsetNetImpl>(c.width_per_layer * c.layers, 0.1);
      },
      config);
  net->to(device);
  return net;
}

struct Excerpt {
  torch::Tensor frames;  // [B, T, kBins]
  torch::Tensor onsets;  // [B, T, kKeys], 0/1
  bool silent;
};

// Synthetic excerpts: a few keys struck at random frames, each smearing a
// harmonic comb over the mel bins. Every 50th excerpt is a silence gap of
// the recording, with no onset at all.
Excerpt synth_excerpt(int64_t index, int64_t batch, torch::Device device) {
  auto opts = torch::TensorOptions().device(device);
  const bool silent = index % 50 == 49;
  auto onsets = (torch::rand({batch, kFrames, kKeys}, opts) < (silent ? 0.0 : 0.02)).to(torch::kFloat);
  auto comb = torch::rand({kBins, kKeys}, opts).pow(4);
  // The mel front end writes bins-major [B, bins, T].
  auto bins_major = torch::log1p(torch::matmul(comb, onsets.transpose(1, 2)) +
                                 0.05 * torch::rand({batch, kBins, kFrames}, opts));
  auto frames = bins_major.transpose(1, 2);
  // BUG(torch-tensor-to-discarded): contiguous() returns a new tensor;
  // `frames` stays a strided view.
  frames.contiguous();
  return {frames, onsets, silent};
}

double onset_f1(const std::shared_ptr<OnsetNetImpl> &net, const std::vector<Excerpt> &val) {
  torch::NoGradGuard no_grad;
  double tp = 0, fp = 0, fn = 0;
  for (const auto &ex : val) {
    // BUG(torch-eval-mode-missing): main() evaluates right after training;
    // nothing switched the net to eval(), so Dropout is still active.
    auto hits = torch::sigmoid(net->forward(ex.frames)) > 0.5;
    auto truth = ex.onsets > 0.5;
    tp += (hits & truth).sum().item<double>();
    fp += (hits & ~truth).sum().item<double>();
    fn += (~hits & truth).sum().item<double>();
  }
  return 2 * tp / std::max(1.0, 2 * tp + fp + fn);
}

int main(int argc, char **argv) {
  torch::manual_seed(130);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  OnsetConfig config = WideConfig{512, 0.25};
  if (argc > 1)
    config = StackedConfig{128, 3};
  auto net = OnsetNetImpl::build_on(config, device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(3e-4));
  auto pos_weight = torch::full({kKeys}, 20.0, torch::TensorOptions().device(device));

  std::deque<torch::Tensor> recent;         // last 32 losses, for the smoothed log
  std::deque<torch::Tensor> recent_detached;
  double epoch_loss = 0.0;
  for (int64_t step = 0; step < 1500; ++step) {
    auto ex = synth_excerpt(step, 16, device);
    if (ex.silent)
      continue;  // nothing to learn from an excerpt without a note
    opt.zero_grad();
    auto logits = net->forward(ex.frames);
    auto loss = torch::nn::functional::binary_cross_entropy_with_logits(
        logits, ex.onsets, torch::nn::functional::BinaryCrossEntropyWithLogitsFuncOptions().pos_weight(pos_weight));
    loss.backward();
    // OK(torch-missing-zero-grad): the only path that skips the reset is the
    // `continue`, which also skips the backward.
    opt.step();
    // BUG(torch-host-sync-in-loop): an unconditional item() every step
    // stalls the pipeline for a number only the epoch summary needs.
    epoch_loss += loss.item<double>();

    // BUG(torch-loss-accumulation-graph): the ring buffer outlives the
    // iteration and keeps the graphs of the last 32 steps alive.
    recent.push_back(loss);
    if (recent.size() > 32)
      recent.pop_front();
    // OK(torch-loss-accumulation-graph): detached before it is kept.
    recent_detached.push_back(loss.detach());
    if (recent_detached.size() > 32)
      recent_detached.pop_front();
    if (step % 100 == 0) {
      std::vector<torch::Tensor> window(recent_detached.begin(), recent_detached.end());
      // OK(torch-host-sync-in-loop): only on logging steps.
      std::cout << "step " << step << " smoothed bce " << torch::stack(window).mean().item<double>() << "\n";
    }
  }
  std::cout << "summed loss " << epoch_loss << "\n";

  std::vector<Excerpt> val;
  for (int i = 0; i < 8; ++i)
    val.push_back(synth_excerpt(i, 32, device));
  std::cout << "onset f1 " << onset_f1(net, val) << "\n";

  net->eval();
  torch::NoGradGuard no_grad;
  // OK(torch-device-mismatch): the excerpt is generated on `device`.
  auto roll = torch::sigmoid(net->forward(val.front().frames));
  std::cout << "keys struck " << (roll > 0.5).sum().item<int64_t>() << "\n";
  auto click_track = torch::zeros({1, kFrames, kBins});
  click_track.select(1, 0).fill_(1.0);
  // BUG(torch-device-mismatch): the click track is built on the CPU; the
  // factory put the net on `device`.
  auto click_roll = net->forward(click_track);
  std::cout << "click response " << click_roll.abs().max().item<double>() << "\n";
  return 0;
}
