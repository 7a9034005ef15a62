// Token tagger (part-of-speech style) over padded sequences. The padding mask
// is optional throughout: the loss and the prediction helpers take a
// std::optional<torch::Tensor> and fall back to "every token counts". The
// trainer clips gradients with a hand-written helper that also reports the
// norm, and a warmup-then-cosine scheduler object sets the learning rate.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>

constexpr int64_t kVocab = 500;
constexpr int64_t kTags = 12;
constexpr int64_t kLen = 24;

struct TaggerImpl : torch::nn::Module {
  TaggerImpl()
      : emb(register_module("emb", torch::nn::Embedding(kVocab, 64))),
        drop(register_module("drop", torch::nn::Dropout(0.2))),
        proj(register_module("proj", torch::nn::Linear(64, 64))),
        out(register_module("out", torch::nn::Linear(64, kTags))) {}
  torch::Tensor forward(torch::Tensor tokens) { return out(drop(torch::relu(proj(emb(tokens))))); }
  torch::nn::Embedding emb;
  torch::nn::Dropout drop;
  torch::nn::Linear proj, out;
};
TORCH_MODULE(Tagger);

class WarmupCosine {
 public:
  WarmupCosine(double base, int64_t warmup, int64_t total) : base_(base), warmup_(warmup), total_(total) {}
  void apply(torch::optim::AdamW &opt, int64_t step) const {
    const double lr = step < warmup_ ? base_ * (step + 1) / warmup_
                                     : 0.5 * base_ * (1.0 + std::cos(M_PI * (step - warmup_) / (total_ - warmup_)));
    for (auto &group : opt.param_groups())
      static_cast<torch::optim::AdamWOptions &>(group.options()).lr(lr);
  }

 private:
  double base_;
  int64_t warmup_, total_;
};

// Scales the gradients down to max_norm; returns the norm before clipping.
double clip_gradients(Tagger &net, double max_norm) {
  std::vector<torch::Tensor> norms;
  for (auto &p : net->parameters())
    if (p.grad().defined())
      norms.push_back(p.grad().norm());
  auto total = torch::stack(norms).norm();
  auto scale = torch::clamp_max(max_norm / (total + 1e-6), 1.0);
  for (auto &p : net->parameters())
    if (p.grad().defined())
      p.grad().mul_(scale);
  // BUG(torch-host-sync-in-loop): called on every training step; reading
  // the norm back waits for the whole backward pass.
  return total.item<double>();
}

torch::Tensor masked_ce(const torch::Tensor &logits, const torch::Tensor &tags, std::optional<torch::Tensor> mask) {
  auto ce = torch::nn::functional::cross_entropy(
      logits.reshape({-1, kTags}), tags.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  if (!mask)
    return ce.mean();
  auto m = mask->reshape({-1});
  return (ce * m).sum() / m.sum().clamp_min(1.0);
}

struct Batch {
  torch::Tensor tokens;
  torch::Tensor tags;
  torch::Tensor mask;
};

Batch random_batch(int64_t n) {
  auto lengths = torch::randint(4, kLen + 1, {n, 1});
  auto mask = (torch::arange(kLen).unsqueeze(0) < lengths).to(torch::kFloat);
  auto tokens = torch::randint(1, kVocab, {n, kLen}) * mask.to(torch::kLong);
  return {tokens, tokens.remainder(kTags), mask};
}

// Greedy tags for one batch; the mask, when given, zeroes the padding.
torch::Tensor predict(Tagger &net, const torch::Tensor &tokens, std::optional<torch::Tensor> mask,
                      torch::Device device) {
  torch::NoGradGuard no_grad;
  // OK(torch-inference-without-no-grad): the guard is held right here, and
  // main() calls this in a loop.
  auto tags = net->forward(tokens.to(device)).argmax(-1);
  if (mask) {
    // BUG(torch-tensor-to-discarded): the moved mask is thrown away; *mask
    // stays on the host.
    mask->to(device);
    // OK(torch-device-mismatch): the mask is moved inline here.
    tags = tags * mask->to(device).to(torch::kLong);
  }
  return tags;
}

int main() {
  torch::manual_seed(7);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Tagger net;
  // OK(torch-tensor-to-discarded): Module::to moves the module in place.
  net->to(device);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.01));
  const int64_t steps = 2000;
  WarmupCosine sched(3e-3, 100, steps);

  net->train();
  for (int64_t step = 0; step < steps; ++step) {
    auto b = random_batch(64);
    sched.apply(opt, step);
    opt.zero_grad();
    // OK(torch-device-mismatch): tokens, tags and mask all moved to 'device'.
    auto logits = net->forward(b.tokens.to(device));
    auto loss = masked_ce(logits, b.tags.to(device), b.mask.to(device));
    loss.backward();
    const double norm = clip_gradients(net, 1.0);
    opt.step();
    if (step % 100 == 0) {
      // OK(torch-host-sync-in-loop): every 100 steps.
      std::cout << "step " << step << " loss " << loss.item<double>() << " |g| " << norm << '\n';
    }
  }

  net->eval();
  auto b = random_batch(256);
  {
    torch::NoGradGuard no_grad;
    // BUG(torch-device-mismatch): the logits are on 'device', the tags and
    // mask handed to the loss were left on the host.
    auto val = masked_ce(net->forward(b.tokens.to(device)), b.tags, b.mask);
    std::cout << "val loss " << val.item<double>() << '\n';
    // OK(torch-device-mismatch): without a mask, only the tags are compared,
    // and they were moved.
    auto plain = masked_ce(net->forward(b.tokens.to(device)), b.tags.to(device), std::nullopt);
    std::cout << "unmasked " << plain.item<double>() << '\n';
  }
  auto correct = torch::zeros({}, torch::TensorOptions().device(device));
  for (int i = 0; i < 8; ++i) {
    auto t = random_batch(128);
    auto tags = predict(net, t.tokens, t.mask, device);
    // OK(torch-loss-accumulation-graph): predict() ran under its own guard,
    // and argmax/eq carry no graph anyway.
    correct += tags.eq(t.tags.to(device)).sum();
  }
  std::cout << "accuracy " << correct.item<double>() / (8.0 * 128 * kLen) << '\n';
  return 0;
}
