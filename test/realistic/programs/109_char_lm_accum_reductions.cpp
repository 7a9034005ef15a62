// A next-character model (embeddings of an 8-character window, an MLP with
// Dropout) on a small repeated corpus. Pretraining sums the token losses and
// folds the 1/tokens normalisation into the learning rate; fine-tuning on a
// user's own text uses the default, mean-reduced criterion. Both accumulate
// gradients over several micro-batches per update.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

constexpr int64_t kContext = 8;
constexpr int64_t kVocab = 128; // 7-bit ASCII

struct CharMlpImpl : torch::nn::Module {
  CharMlpImpl()
      : embed(register_module("embed", torch::nn::Embedding(kVocab, 32))),
        hidden(register_module("hidden", torch::nn::Linear(kContext * 32, 256))),
        drop(register_module("drop", torch::nn::Dropout(0.1))),
        out(register_module("out", torch::nn::Linear(256, kVocab))) {}
  torch::Tensor forward(torch::Tensor context) {
    return out(drop(torch::gelu(hidden(embed(context).flatten(1)))));
  }
  torch::nn::Embedding embed;
  torch::nn::Linear hidden;
  torch::nn::Dropout drop;
  torch::nn::Linear out;
};
TORCH_MODULE(CharMlp);

struct Windows {
  torch::Tensor context, next;
  int64_t size() const { return next.size(0); }
};

int64_t char_id(char c) { return static_cast<unsigned char>(c) % kVocab; }

Windows make_windows(const std::string &text, torch::Device device) {
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (char c : text)
    ids.push_back(char_id(c));
  auto all = torch::tensor(ids, torch::kLong).to(device);
  auto win = all.unfold(0, kContext + 1, 1);
  return {win.narrow(1, 0, kContext).contiguous(), win.select(1, kContext).contiguous()};
}

struct RunConfig {
  int64_t micro_batch = 64;
  int64_t accum = 4;
  int epochs = 2;
};

void pretrain(CharMlp &lm, const Windows &data, const RunConfig &cfg) {
  lm->train();
  torch::nn::CrossEntropyLoss criterion(torch::nn::CrossEntropyLossOptions().reduction(torch::kSum));
  const double tokens_per_update = static_cast<double>(cfg.micro_batch * cfg.accum);
  torch::optim::SGD opt(lm->parameters(), torch::optim::SGDOptions(0.5 / tokens_per_update).momentum(0.9));
  opt.zero_grad();
  int64_t micro = 0;
  for (int epoch = 0; epoch < cfg.epochs; ++epoch) {
    auto perm = torch::randperm(data.size(), data.next.options());
    for (int64_t start = 0; start + cfg.micro_batch <= data.size(); start += cfg.micro_batch) {
      auto idx = perm.narrow(0, start, cfg.micro_batch);
      auto logits = lm->forward(data.context.index_select(0, idx));
      auto loss = criterion(logits, data.next.index_select(0, idx));
      // OK(torch-grad-accumulation-unscaled): a summed loss; the 1/tokens
      // normalisation is in the learning rate.
      loss.backward();
      if (++micro % cfg.accum == 0) {
        // BUG(torch-missing-zero-grad): the gradients are reset once, before
        // the first epoch; every later update adds all earlier windows' sums.
        opt.step();
      }
    }
  }
}

double finetune(CharMlp &lm, const Windows &user, const RunConfig &cfg) {
  lm->train();
  torch::nn::CrossEntropyLoss criterion;
  torch::optim::AdamW opt(lm->parameters(), torch::optim::AdamWOptions(3e-4));
  opt.zero_grad();
  auto running = torch::zeros({}, user.context.options().dtype(torch::kFloat));
  int64_t micro = 0;
  for (int epoch = 0; epoch < cfg.epochs; ++epoch) {
    for (int64_t start = 0; start + cfg.micro_batch <= user.size(); start += cfg.micro_batch) {
      auto loss = criterion(lm->forward(user.context.narrow(0, start, cfg.micro_batch)),
                            user.next.narrow(0, start, cfg.micro_batch));
      running += loss.detach();
      // BUG(torch-grad-accumulation-unscaled): the criterion averages each
      // micro-batch, and cfg.accum such averages add up before each step.
      loss.backward();
      if (++micro % cfg.accum == 0) {
        // OK(torch-missing-zero-grad): step and reset under one condition.
        opt.step();
        opt.zero_grad();
      }
    }
  }
  return (running / std::max<int64_t>(micro, 1)).item<double>();
}

double perplexity(CharMlp &lm, const Windows &split) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): main() calls eval() before each evaluation.
  auto logits = lm->forward(split.context);
  return std::exp(torch::nn::functional::cross_entropy(logits, split.next).item<double>());
}

std::string greedy_continue(CharMlp &lm, std::string prompt, int n, torch::Device device) {
  torch::NoGradGuard no_grad;
  for (int i = 0; i < n; ++i) {
    std::vector<int64_t> ctx;
    for (size_t k = prompt.size() - kContext; k < prompt.size(); ++k)
      ctx.push_back(char_id(prompt[k]));
    auto x = torch::tensor(ctx, torch::kLong).to(device).unsqueeze(0);
    // OK(torch-eval-mode-missing): only called after eval().
    const int64_t next = lm->forward(x).argmax(1).item<int64_t>();
    prompt.push_back(static_cast<char>(next));
  }
  return prompt;
}

int main() {
  torch::manual_seed(17);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  std::string corpus, user_text;
  for (int i = 0; i < 200; ++i)
    corpus += "the quick brown fox jumps over the lazy dog. pack my box with five dozen liquor jugs. ";
  for (int i = 0; i < 60; ++i)
    user_text += "sphinx of black quartz, judge my vow. how vexingly quick daft zebras jump! ";

  CharMlp lm;
  lm->to(device);
  RunConfig cfg;
  pretrain(lm, make_windows(corpus, device), cfg);
  lm->eval();
  auto user = make_windows(user_text, device);
  std::cout << "user-text perplexity before " << perplexity(lm, user) << '\n';

  std::cout << "fine-tune loss " << finetune(lm, user, cfg) << '\n';
  lm->eval();
  std::cout << "user-text perplexity after " << perplexity(lm, user) << '\n';
  std::cout << greedy_continue(lm, "sphinx of black ", 40, device) << '\n';
}
