// Bird-call tagging on log-mel clips (64 mel bins x 128 frames, 24 species,
// multi-label). The tagger has a frame-level head and an attention-pooled
// clip-level head; forward() returns both as a tuple that the trainer takes
// apart with std::tie, and the per-head losses come back from
// compute_losses() as a small struct returned by value. Running sums live in
// a MetricBook (an unordered_map<std::string, torch::Tensor> keyed by metric
// name) and in a std::array with one slot per head; scalar logging goes
// through the LOG_SCALAR macros of the project's tiny logging header.
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#define LOG_SCALAR(step, name, t) std::cout << "[" << (step) << "] " << (name) << " " << (t).item<float>() << "\n"
#define LOG_SCALAR_EVERY(n, step, name, t) \
  if ((step) % (n) == 0)                   \
  LOG_SCALAR(step, name, t)

constexpr int64_t kMels = 64, kFrames = 128, kSpecies = 24;

struct TaggerImpl : torch::nn::Module {
  TaggerImpl()
      : conv1(register_module("conv1", torch::nn::Conv1d(torch::nn::Conv1dOptions(kMels, 128, 5).padding(2)))),
        conv2(register_module("conv2", torch::nn::Conv1d(torch::nn::Conv1dOptions(128, 128, 5).padding(2)))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        frame_head(register_module("frame_head", torch::nn::Linear(128, kSpecies))),
        attn(register_module("attn", torch::nn::Linear(128, kSpecies))) {}

  // mel [B, kMels, T] -> (clip logits [B, S], frame logits [B, T, S])
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor &mel) {
    auto h = torch::relu(conv2(torch::relu(conv1(mel)))).transpose(1, 2);  // [B, T, 128]
    h = drop(h);
    auto frame = frame_head(h);
    auto weights = torch::softmax(attn(h), 1);
    auto clip = (weights * frame).sum(1);
    return {clip, frame};
  }

  torch::nn::Conv1d conv1, conv2;
  torch::nn::Dropout drop;
  torch::nn::Linear frame_head, attn;
};
TORCH_MODULE(Tagger);

struct HeadLosses {
  torch::Tensor clip;
  torch::Tensor frame;
  torch::Tensor total;
};

HeadLosses compute_losses(const torch::Tensor &clip_logits, const torch::Tensor &frame_logits,
                          const torch::Tensor &clip_targets) {
  HeadLosses l;
  l.clip = torch::binary_cross_entropy_with_logits(clip_logits, clip_targets);
  // Weak frame labels: every frame inherits the clip's species.
  auto frame_targets = clip_targets.unsqueeze(1).expand_as(frame_logits);
  l.frame = torch::binary_cross_entropy_with_logits(frame_logits, frame_targets);
  l.total = l.clip + 0.5 * l.frame;
  return l;
}

std::pair<torch::Tensor, torch::Tensor> synthetic_batch(int64_t n, torch::Device device) {
  auto mel = torch::randn({n, kMels, kFrames});
  auto targets = (torch::rand({n, kSpecies}) < 0.1).to(torch::kFloat);
  mel.narrow(1, 10, 8).add_(targets.narrow(1, 0, 1).unsqueeze(2) * 2.0);
  return {mel.to(device), targets.to(device)};
}

class MetricBook {
 public:
  MetricBook(const std::vector<std::string> &keys, torch::Device device) {
    for (const auto &k : keys) {
      sums_[k] = torch::zeros({}, torch::TensorOptions().device(device));
      counts_[k] = 0;
    }
  }

  void add(const std::string &key, const torch::Tensor &value) {
    // BUG(torch-loss-accumulation-graph): train_epoch() adds the clip loss
    // straight from the step, graph and all; the book lives for the epoch.
    sums_[key] += value;
    counts_[key] += 1;
  }

  std::map<std::string, double> means() const {
    std::map<std::string, double> out;
    for (const auto &kv : sums_)
      out[kv.first] = kv.second.item<double>() / std::max<int64_t>(1, counts_.at(kv.first));
    return out;
  }

 private:
  std::unordered_map<std::string, torch::Tensor> sums_;
  std::unordered_map<std::string, int64_t> counts_;
};

void train_epoch(Tagger &model, torch::optim::Optimizer &opt, int64_t steps, torch::Device device,
                 std::map<std::string, std::vector<double>> &history) {
  model->train();
  MetricBook book({"clip", "frame"}, device);
  std::array<torch::Tensor, 2> head_sums{torch::zeros({}, device), torch::zeros({}, device)};
  for (int64_t step = 0; step < steps; ++step) {
    auto [mel, targets] = synthetic_batch(32, device);
    torch::Tensor clip_logits, frame_logits;
    std::tie(clip_logits, frame_logits) = model->forward(mel);
    HeadLosses l = compute_losses(clip_logits, frame_logits, targets);

    opt.zero_grad();
    l.total.backward();
    opt.step();

    book.add("clip", l.clip);
    // OK(torch-loss-accumulation-graph): the frame loss is detached first.
    book.add("frame", l.frame.detach());

    std::array<torch::Tensor, 2> parts{l.clip, l.frame};
    for (size_t h = 0; h < parts.size(); ++h) {
      // BUG(torch-loss-accumulation-graph): head_sums outlives the step and
      // keeps every step's clip and frame graphs alive.
      head_sums[h] += parts[h];
    }

    // BUG(torch-host-sync-in-loop): the macro reads the total loss back to
    // the host on every step.
    LOG_SCALAR(step, "loss", l.total);
    // OK(torch-host-sync-in-loop): the macro's own condition, every 50 steps.
    LOG_SCALAR_EVERY(50, step, "clip_loss", l.clip);

    std::array<std::pair<std::string, torch::Tensor>, 2> named{{{"clip", l.clip}, {"frame", l.frame}}};
    std::for_each(named.begin(), named.end(), [&history](const std::pair<std::string, torch::Tensor> &kv) {
      // BUG(torch-host-sync-in-loop): std::for_each runs this for both heads
      // on every training step; each .item() waits for the GPU.
      history[kv.first].push_back(kv.second.item<double>());
    });
  }
  for (const auto &kv : book.means())
    std::cout << "epoch mean " << kv.first << " " << kv.second << "\n";
  std::cout << "head sums " << head_sums[0].item<double>() << " " << head_sums[1].item<double>() << "\n";
}

double validate(Tagger &model, int64_t batches, torch::Device device) {
  model->eval();
  torch::NoGradGuard no_grad;
  auto total = torch::zeros({}, device);
  for (int64_t b = 0; b < batches; ++b) {
    auto [mel, targets] = synthetic_batch(64, device);
    torch::Tensor clip_logits, frame_logits;
    // OK(torch-inference-without-no-grad, torch-eval-mode-missing): eval()
    // and a NoGradGuard above the loop.
    std::tie(clip_logits, frame_logits) = model->forward(mel);
    // OK(torch-loss-accumulation-graph): computed under the NoGradGuard.
    total += compute_losses(clip_logits, frame_logits, targets).total;
  }
  return total.item<double>() / batches;
}

int main() {
  torch::manual_seed(3);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Tagger model;
  model->to(device);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-2));

  std::map<std::string, std::vector<double>> history;
  for (int epoch = 0; epoch < 10; ++epoch) {
    train_epoch(model, opt, 400, device, history);
    std::cout << "epoch " << epoch << " val loss " << validate(model, 20, device) << "\n";
  }
  std::cout << "logged " << history["clip"].size() << " clip losses\n";
  return 0;
}
