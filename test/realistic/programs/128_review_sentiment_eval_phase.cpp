// Product-review sentiment: token embeddings averaged over the review, then
// an MLP. The Dropout sits two levels down (SentimentNet -> Encoder ->
// Mixer). Validation switches modes through an EvalPhase scope (eval() in
// its constructor, back to train() in its destructor) and measures through
// a function template shared with a linear bag-of-words baseline that has no
// mode-dependent layer. After training, a temperature is fitted on held-out
// logits, and the model is fine-tuned on reviews from a new product line.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <vector>

constexpr int64_t kVocab = 5000;
constexpr int64_t kLen = 48;

struct MixerImpl : torch::nn::Module {
  MixerImpl()
      : fc(register_module("fc", torch::nn::Linear(64, 64))), drop(register_module("drop", torch::nn::Dropout(0.4))) {}
  torch::Tensor forward(torch::Tensor h) { return h + drop(torch::gelu(fc(h))); }
  torch::nn::Linear fc;
  torch::nn::Dropout drop;
};
TORCH_MODULE(Mixer);

struct EncoderImpl : torch::nn::Module {
  EncoderImpl()
      : embed(register_module("embed", torch::nn::Embedding(kVocab, 64))), mixer(register_module("mixer", Mixer())) {}
  torch::Tensor forward(torch::Tensor tokens) { return mixer(embed(tokens).mean(1)); }
  torch::nn::Embedding embed;
  Mixer mixer;
};
TORCH_MODULE(Encoder);

struct SentimentNetImpl : torch::nn::Module {
  SentimentNetImpl()
      : encoder(register_module("encoder", Encoder())), out(register_module("out", torch::nn::Linear(64, 2))) {}
  torch::Tensor forward(torch::Tensor tokens) { return out(encoder(tokens)); }
  Encoder encoder;
  torch::nn::Linear out;
};
TORCH_MODULE(SentimentNet);

// Counts of each token, then one linear layer: nothing depends on the mode.
struct BowBaselineImpl : torch::nn::Module {
  BowBaselineImpl() : fc(register_module("fc", torch::nn::Linear(kVocab, 2))) {}
  torch::Tensor forward(torch::Tensor tokens) {
    auto counts = torch::zeros({tokens.size(0), kVocab}, fc->weight.options());
    return fc(counts.scatter_add_(1, tokens, torch::ones_like(tokens, fc->weight.options())));
  }
  torch::nn::Linear fc;
};
TORCH_MODULE(BowBaseline);

struct Reviews {
  torch::Tensor tokens, labels;
};

// Positive reviews draw more often from the first `cut` token ids.
Reviews synth_reviews(int64_t n, int64_t cut, torch::Device device) {
  auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto labels = torch::randint(2, {n}, ids);
  auto skew = torch::randint(cut, {n, kLen}, ids);
  auto rest = torch::randint(kVocab, {n, kLen}, ids);
  auto pick = torch::rand({n, kLen}, device) < (0.3 + 0.4 * labels.to(torch::kFloat).unsqueeze(1));
  return {torch::where(pick, skew, rest), labels};
}

class EvalPhase {
public:
  explicit EvalPhase(torch::nn::Module &module) : module_(module) { module_.eval(); }
  ~EvalPhase() { module_.train(); }

private:
  torch::nn::Module &module_;
};

template <typename Net> double accuracy(Net &net, const Reviews &split) {
  torch::NoGradGuard no_grad;
  // OK(torch-eval-mode-missing): SentimentNet is measured under an EvalPhase
  // or after eval(); BowBaseline has no Dropout or BatchNorm.
  auto pred = net->forward(split.tokens).argmax(1);
  return pred.eq(split.labels).to(torch::kFloat).mean().template item<double>();
}

template <typename Net> void fit(Net &net, const Reviews &train, const Reviews &val, int epochs, double lr) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(lr));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    net->train();
    for (int64_t start = 0; start + 64 <= train.tokens.size(0); start += 64) {
      net->zero_grad();
      // OK(torch-eval-mode-missing): train() at the top of every epoch.
      auto logits = net->forward(train.tokens.narrow(0, start, 64));
      auto loss = torch::nn::functional::cross_entropy(logits, train.labels.narrow(0, start, 64));
      loss.backward();
      // OK(torch-missing-zero-grad): net->zero_grad() at the top of every batch.
      opt.step();
    }
    EvalPhase phase(*net);
    std::cout << "epoch " << epoch << " val acc " << accuracy(net, val) << '\n';
  }
}

// Temperature scaling: one scalar that calibrates the softmax of held-out logits.
double fit_temperature(SentimentNet &net, const Reviews &held_out) {
  torch::Tensor logits;
  {
    torch::NoGradGuard no_grad;
    // BUG(torch-eval-mode-missing): fit() ended with the EvalPhase's train(),
    // so the logits are calibrated with Dropout on.
    logits = net->forward(held_out.tokens);
  }
  auto log_t = torch::zeros({1}, logits.options().requires_grad(true));
  torch::optim::Adam opt({log_t}, torch::optim::AdamOptions(1e-2));
  for (int it = 0; it < 200; ++it) {
    auto loss = torch::nn::functional::cross_entropy(logits / log_t.exp(), held_out.labels);
    loss.backward();
    // BUG(torch-missing-zero-grad): log_t's gradient is never reset, so each
    // step follows the sum of all earlier iterations' gradients.
    opt.step();
  }
  return log_t.exp().item<double>();
}

// Adapts to a new product line, where positive words sit lower in the vocab.
void finetune_line(SentimentNet &net, const Reviews &line) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(5e-3).momentum(0.9));
  for (int pass = 0; pass < 3; ++pass) {
    for (int64_t start = 0; start + 32 <= line.tokens.size(0); start += 32) {
      opt.zero_grad();
      // BUG(torch-eval-mode-missing): main() called net->eval() to measure the
      // new line first and nothing calls train(): the fine-tune runs with
      // Dropout off.
      auto logits = net->forward(line.tokens.narrow(0, start, 32));
      torch::nn::functional::cross_entropy(logits, line.labels.narrow(0, start, 32)).backward();
      opt.step();
    }
  }
}

int main() {
  torch::manual_seed(128);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto train = synth_reviews(4096, 800, device), val = synth_reviews(512, 800, device);

  BowBaseline baseline;
  baseline->to(device);
  fit(baseline, train, val, 2, 1e-2);
  std::cout << "baseline acc " << accuracy(baseline, val) << '\n';

  SentimentNet net;
  net->to(device);
  fit(net, train, val, 5, 1e-3);
  std::cout << "temperature " << fit_temperature(net, val) << '\n';

  auto line_train = synth_reviews(1024, 400, device), line_val = synth_reviews(256, 400, device);
  net->eval();
  std::cout << "new line acc before " << accuracy(net, line_val) << '\n';
  finetune_line(net, line_train);
  net->eval();
  std::cout << "new line acc after " << accuracy(net, line_val) << '\n';
}
