// A small decoder-only transformer over MIDI event tokens (128 note-on, 128
// note-off, 100 time-shift and 32 velocity events: the Music Transformer
// vocabulary of 388). Training samples random windows from one long token
// stream; the window helper returns an (input, target) tuple taken apart with
// structured bindings. Training may resume from the step stored next to the
// checkpoint (a std::optional), the held-out perplexity is one pass over the
// whole validation stream, and sampling falls back to fewer parallel
// variations when the GPU runs out of memory.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

namespace F = torch::nn::functional;

constexpr int64_t kVocab = 388;
constexpr int64_t kMaxLen = 256;

struct MusicLMImpl : torch::nn::Module {
  MusicLMImpl(int64_t d_model, int64_t layers)
      : tok(register_module("tok", torch::nn::Embedding(kVocab, d_model))),
        pos(register_module("pos", torch::nn::Embedding(kMaxLen, d_model))),
        encoder(register_module(
            "encoder", torch::nn::TransformerEncoder(torch::nn::TransformerEncoderOptions(
                           torch::nn::TransformerEncoderLayerOptions(d_model, 8).dim_feedforward(4 * d_model).dropout(0.1),
                           layers)))),
        head(register_module("head", torch::nn::Linear(d_model, kVocab))) {}

  // tokens [T, B] -> logits [T, B, kVocab], causal.
  torch::Tensor forward(const torch::Tensor &tokens) {
    const int64_t t = tokens.size(0);
    auto positions = torch::arange(t, tokens.options()).unsqueeze(1);
    auto h = tok(tokens) + pos(positions);
    auto mask = torch::full({t, t}, -std::numeric_limits<float>::infinity(), h.options()).triu(1);
    return head(encoder(h, mask));
  }

  torch::nn::Embedding tok, pos;
  torch::nn::TransformerEncoder encoder;
  torch::nn::Linear head;
};
TORCH_MODULE(MusicLM);

struct TrainConfig {
  int64_t steps = 20000;
  int64_t batch = 32;
  int64_t len = 192;
  int64_t log_every = 200;
  double lr = 3e-4;
};

// A fake performance: scales and arpeggios with time shifts in between.
torch::Tensor make_stream(int64_t n, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto base = torch::randint(0, 128, {n / 4}, gen, torch::kLong);
  auto shift = 256 + torch::randint(0, 100, {n / 4}, gen, torch::kLong);
  auto vel = 356 + torch::randint(0, 32, {n / 4}, gen, torch::kLong);
  return torch::stack({vel, base, shift, base + 128}, 1).flatten();
}

std::tuple<torch::Tensor, torch::Tensor> sample_windows(const torch::Tensor &stream, int64_t batch, int64_t len,
                                                        torch::Device device) {
  auto starts = torch::randint(0, stream.size(0) - len - 1, {batch}, torch::kLong);
  auto idx = starts.unsqueeze(1) + torch::arange(len + 1, torch::kLong).unsqueeze(0);  // [B, len + 1]
  auto win = stream.index_select(0, idx.flatten()).view({batch, len + 1}).t().contiguous().to(device);
  return {win.slice(0, 0, len), win.slice(0, 1, len + 1)};
}

std::optional<int64_t> saved_step(const std::string &path) {
  std::ifstream in(path);
  int64_t step = 0;
  if (in >> step)
    return step;
  return std::nullopt;
}

void train(MusicLM &model, const torch::Tensor &stream, const TrainConfig &cfg, std::optional<int64_t> resume,
           torch::Device device) {
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(cfg.lr).betas({0.9, 0.98}));
  double smoothed = std::log(static_cast<double>(kVocab));
  for (int64_t step = resume.value_or(0); step < cfg.steps; ++step) {
    auto [inputs, targets] = sample_windows(stream, cfg.batch, cfg.len, device);
    opt.zero_grad();
    auto logits = model->forward(inputs);
    auto loss = F::cross_entropy(logits.view({-1, kVocab}), targets.reshape({-1}));
    loss.backward();
    opt.step();
    // BUG(torch-host-sync-in-loop): the smoothed loss reads the loss back to
    // the host on every step, although it is only printed every log_every.
    smoothed = 0.98 * smoothed + 0.02 * loss.item<double>();
    if (step % cfg.log_every == 0) {
      // OK(torch-host-sync-in-loop): printed every log_every steps.
      std::cout << "step " << step << " loss " << smoothed << " (last " << loss.item<float>() << ")\n";
      std::ofstream("music_lm.step") << step;
    }
  }
}

// Negative log-likelihood per token over the whole stream, in windows of
// kMaxLen tokens batched along dim 1.
double stream_nll(MusicLM &model, const torch::Tensor &stream, torch::Device device) {
  const int64_t windows = (stream.size(0) - 1) / kMaxLen;
  auto body = stream.slice(0, 0, windows * kMaxLen + 1);
  auto inputs = body.slice(0, 0, windows * kMaxLen).view({windows, kMaxLen}).t().to(device);
  auto targets = body.slice(0, 1, windows * kMaxLen + 1).view({windows, kMaxLen}).t().to(device);
  auto logits = model->forward(inputs);
  return F::cross_entropy(logits.view({-1, kVocab}), targets.reshape({-1})).item<double>();
}

double heldout_perplexity(MusicLM &model, const torch::Tensor &stream, torch::Device device) {
  torch::NoGradGuard no_grad;
  model->eval();
  try {
    return std::exp(stream_nll(model, stream, device));
  } catch (const c10::Error &e) {
    if (std::string(e.what()).find("CUDA out of memory") == std::string::npos)
      throw;
    std::cerr << "validation pass ran out of memory, emptying the cache and retrying\n";
    // BUG(torch-empty-cache-oom-retry): the whole stream is scored again in
    // one pass of the same size; the allocator had already emptied its cache.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return std::exp(stream_nll(model, stream, device));
  }
}

torch::Tensor continue_phrase(MusicLM &model, const torch::Tensor &prompt, int64_t variations, int64_t new_tokens,
                              torch::Device device) {
  torch::NoGradGuard no_grad;
  auto seq = prompt.to(device).unsqueeze(1).repeat({1, variations});  // [T, V]
  for (int64_t i = 0; i < new_tokens; ++i) {
    auto ctx = seq.slice(0, std::max<int64_t>(0, seq.size(0) - kMaxLen));
    // OK(torch-inference-without-no-grad): the guard at the top covers the
    // decoding loop.
    auto logits = model->forward(ctx).select(0, -1) / 0.9;  // [V, kVocab]
    auto next = torch::multinomial(torch::softmax(logits, -1), 1).t();  // [1, V]
    seq = torch::cat({seq, next}, 0);
  }
  return seq;
}

torch::Tensor sample_variations(MusicLM &model, const torch::Tensor &prompt, int64_t variations, torch::Device device) {
  try {
    return continue_phrase(model, prompt, variations, 512, device);
  } catch (const c10::OutOfMemoryError &) {
    if (variations == 1)
      throw;
    // OK(torch-empty-cache-oom-retry): the retry decodes half as many
    // variations in parallel.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return sample_variations(model, prompt, variations / 2, device);
  }
}

int main() {
  torch::manual_seed(156);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  MusicLM model(256, 4);
  const auto resume = saved_step("music_lm.step");
  if (resume)
    torch::load(model, "music_lm.pt");
  model->to(device);

  TrainConfig cfg;
  auto train_stream = make_stream(400000, 1);
  auto val_stream = make_stream(40000, 2);
  train(model, train_stream, cfg, resume, device);
  torch::save(model, "music_lm.pt");

  std::cout << "held-out perplexity " << heldout_perplexity(model, val_stream, device) << '\n';

  model->eval();
  auto prompt = val_stream.slice(0, 0, 64);
  auto samples = sample_variations(model, prompt, 16, device).cpu();
  std::cout << "sampled " << samples.size(1) << " variations of " << samples.size(0) << " tokens\n";
  return 0;
}
