// A token tagger for a toy named-entity task (embeddings of each token and
// its neighbours, an MLP with Dropout, one logit per tag). It pretrains in
// float16 autocast under an RAII scope with a static loss scale, serves a few
// tagging requests, then adapts to a shifted vocabulary in bfloat16.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

constexpr int64_t kVocab = 6000;
constexpr int64_t kTags = 5;
constexpr int64_t kSeqLen = 24;
constexpr double kLossScale = 512.0;

// Saves CUDA autocast's state, enables it, and restores the saved state.
class AutocastScope {
public:
  AutocastScope() {
#if TORCH_VERSION_MAJOR >= 2
    previous_ = at::autocast::is_autocast_enabled(at::kCUDA);
    // OK(torch-autocast-region): RAII; the destructor restores the saved state.
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    previous_ = at::autocast::is_enabled();
    // OK(torch-autocast-region): RAII; the destructor restores the saved state.
    at::autocast::set_enabled(true);
#endif
  }
  ~AutocastScope() {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(at::kCUDA, previous_);
#else
    at::autocast::set_enabled(previous_);
#endif
    if (!previous_)
      at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope &) = delete;
  AutocastScope &operator=(const AutocastScope &) = delete;

private:
  bool previous_ = false;
};

struct TaggerImpl : torch::nn::Module {
  TaggerImpl()
      : embed(register_module("embed", torch::nn::Embedding(kVocab, 64))),
        mlp(register_module("mlp", torch::nn::Sequential(torch::nn::Linear(3 * 64, 128), torch::nn::ReLU(),
                                                         torch::nn::Dropout(0.2), torch::nn::Linear(128, kTags)))) {}
  torch::Tensor forward(torch::Tensor tokens) {
    auto e = embed(tokens);
    return mlp->forward(torch::cat({e.roll(1, 1), e, e.roll(-1, 1)}, -1));
  }
  torch::nn::Embedding embed;
  torch::nn::Sequential mlp;
};
TORCH_MODULE(Tagger);

struct TagBatch {
  torch::Tensor tokens, tags;
};

// Tokens below `entity_end` are entities whose tag follows from the id.
TagBatch synth_batch(int64_t n, int64_t entity_end, torch::Device device) {
  auto tokens = torch::randint(kVocab, {n, kSeqLen}, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto tags = torch::where(tokens < entity_end, tokens.remainder(kTags - 1) + 1, torch::zeros_like(tokens));
  return {tokens, tags};
}

torch::Tensor tagging_loss(Tagger &tagger, const TagBatch &batch) {
  auto logits = tagger->forward(batch.tokens);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, kTags}), batch.tags.reshape({-1}));
}

void pretrain(Tagger &tagger, torch::Device device, int steps) {
  tagger->train();
  torch::optim::Adam opt(tagger->parameters(), torch::optim::AdamOptions(1e-3));
  auto running = torch::zeros({}, device);
  for (int step = 0; step < steps; ++step) {
    auto batch = synth_batch(32, 2000, device);
    torch::Tensor loss;
    {
      AutocastScope amp;
      loss = tagging_loss(tagger, batch);
    }
    opt.zero_grad();
    // OK(torch-autocast-region): the scope closed before backward() and the loss is scaled.
    (loss * kLossScale).backward();
    for (auto &p : tagger->parameters())
      p.grad().div_(kLossScale);
    opt.step();
    running += loss.detach();
    if ((step + 1) % 200 == 0) {
      std::cout << "step " << step + 1 << " loss " << (running / 200).item<float>() << '\n';
      running.zero_();
    }
  }
}

// Serves one request; the caller switches the tagger to eval() first.
std::vector<int64_t> tag_sentence(Tagger &tagger, const torch::Tensor &tokens) {
  torch::NoGradGuard no_grad;
  // BUG(torch-autocast-region): the throw below leaves CUDA autocast on for
  // the whole thread; main() catches it and keeps serving in float16.
  at::autocast::set_enabled(true);
  // OK(torch-eval-mode-missing): the caller calls eval() first.
  auto logits = tagger->forward(tokens.unsqueeze(0));
  if (logits.size(-1) != kTags)
    throw std::runtime_error("tagger has " + std::to_string(logits.size(-1)) + " outputs");
  auto tags = logits.argmax(-1).squeeze(0).to(torch::kCPU);
  at::autocast::set_enabled(false);
  at::autocast::clear_cache();
  return std::vector<int64_t>(tags.data_ptr<int64_t>(), tags.data_ptr<int64_t>() + tags.numel());
}

// The new domain's entities extend to id 3000; bfloat16 needs no loss scale.
void adapt_bf16(Tagger &tagger, torch::Device device, int steps) {
  tagger->train();
  torch::optim::SGD opt(tagger->parameters(), torch::optim::SGDOptions(1e-2).momentum(0.9));
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  for (int step = 0; step < steps; ++step) {
    auto batch = synth_batch(32, 3000, device);
    opt.zero_grad();
    at::autocast::set_enabled(true);
    auto loss = tagging_loss(tagger, batch);
    at::autocast::set_enabled(false);
    at::autocast::clear_cache();
    // OK(torch-autocast-region): a bfloat16 region, closed before backward().
    loss.backward();
    // OK(torch-missing-zero-grad): zero_grad() at the top of every step.
    opt.step();
  }
  at::autocast::set_autocast_gpu_dtype(at::kHalf);
}

double tag_accuracy(Tagger &tagger, const TagBatch &held_out) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): main() calls eval() before this.
  auto pred = tagger->forward(held_out.tokens).argmax(-1);
  return pred.eq(held_out.tags).to(torch::kFloat).mean().item<double>();
}

int main() {
  torch::manual_seed(11);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Tagger tagger;
  tagger->to(device);
  pretrain(tagger, device, 1000);

  tagger->eval();
  auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  std::vector<torch::Tensor> requests = {torch::randint(kVocab, {12}, ids), torch::randint(kVocab, {30}, ids)};
  for (const auto &tokens : requests) {
    try {
      auto tags = tag_sentence(tagger, tokens);
      std::cout << "tagged " << tags.size() << " tokens, first tag " << tags.front() << '\n';
    } catch (const std::exception &e) {
      std::cerr << "request failed: " << e.what() << '\n';
    }
  }

  adapt_bf16(tagger, device, 300);
  tagger->eval();
  std::cout << "held-out accuracy " << tag_accuracy(tagger, synth_batch(256, 3000, device)) << '\n';
}
