// Trains a news-topic classifier (mean of token embeddings, Dropout, linear
// head) on synthetic token ids. A short SGD warm-up of the head comes first;
// then an AccumTrainer runs the full recipe with gradient accumulation (the
// GPU holds 32 documents, the recipe wants 128 per update). A smaller
// baseline model trains with the same accumulation for comparison.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <string>
#include <utility>

constexpr int64_t kVocab = 4096;
constexpr int64_t kTopics = 8;
constexpr int64_t kDocLen = 48;

struct TopicNetImpl : torch::nn::Module {
  TopicNetImpl(int64_t dim, double dropout)
      : embed(register_module("embed", torch::nn::Embedding(kVocab, dim))),
        drop(register_module("drop", torch::nn::Dropout(dropout))),
        head(register_module("head", torch::nn::Linear(dim, kTopics))) {}
  torch::Tensor forward(torch::Tensor tokens) { return head(drop(embed(tokens).mean(1))); }
  torch::nn::Embedding embed;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
};
TORCH_MODULE(TopicNet);

struct Corpus {
  torch::Tensor tokens, topics;
  int64_t size() const { return tokens.size(0); }
};

// Each topic owns a band of the vocabulary; a third of the tokens are noise.
Corpus synth_corpus(int64_t docs, torch::Device device) {
  auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto topics = torch::randint(kTopics, {docs}, ids);
  auto band = topics.unsqueeze(1) * (kVocab / kTopics);
  auto offsets = torch::randint(kVocab / kTopics, {docs, kDocLen}, ids);
  auto noise = torch::randint(kVocab, {docs, kDocLen}, ids);
  auto keep = torch::rand({docs, kDocLen}, device) < 0.66;
  return {torch::where(keep, band + offsets, noise), topics};
}

struct AccumConfig {
  int64_t micro_batch = 32;
  int64_t accum_steps = 4;
  int epochs = 3;
  double lr = 2e-3;
};

// Counts correct predictions in chunks; the caller decides the model's mode.
double topic_accuracy(TopicNet &model, const Corpus &split) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0;
  for (int64_t start = 0; start < split.size(); start += 256) {
    const int64_t n = std::min<int64_t>(256, split.size() - start);
    // OK(torch-eval-mode-missing): every caller calls model->eval() first.
    auto pred = model->forward(split.tokens.narrow(0, start, n)).argmax(1);
    correct += pred.eq(split.topics.narrow(0, start, n)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(split.size());
}

// Warms the freshly initialised head up on a few batches before the recipe.
template <typename Optim> void warmup_head(TopicNet &model, Optim &opt, const Corpus &data, int steps) {
  for (int s = 0; s < steps; ++s) {
    const int64_t start = (s * 64) % (data.size() - 64);
    auto logits = model->forward(data.tokens.narrow(0, start, 64));
    auto loss = torch::nn::functional::cross_entropy(logits, data.topics.narrow(0, start, 64));
    loss.backward();
    // BUG(torch-missing-zero-grad): nothing resets the gradients, so every
    // warm-up step applies the sum of all earlier batches' gradients.
    opt.step();
  }
}

class AccumTrainer {
public:
  AccumTrainer(TopicNet model, AccumConfig cfg)
      : model_(std::move(model)), cfg_(cfg),
        opt_(model_->parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(0.01)) {}

  void fit(const Corpus &train) {
    opt_.zero_grad();
    int64_t micro = 0;
    for (int epoch = 0; epoch < cfg_.epochs; ++epoch) {
      model_->train();
      auto running = torch::zeros({}, train.tokens.options().dtype(torch::kFloat));
      int64_t batches = 0;
      for (int64_t start = 0; start + cfg_.micro_batch <= train.size(); start += cfg_.micro_batch) {
        auto logits = model_->forward(train.tokens.narrow(0, start, cfg_.micro_batch));
        auto loss = torch::nn::functional::cross_entropy(logits, train.topics.narrow(0, start, cfg_.micro_batch));
        running += loss.detach();
        ++batches;
        // BUG(torch-grad-accumulation-unscaled): accum_steps mean losses are
        // summed into the gradients before each step, so every update is
        // accum_steps times the one the learning rate was tuned for.
        loss.backward();
        if (++micro % cfg_.accum_steps == 0) {
          // OK(torch-missing-zero-grad): the reset runs under the step's condition.
          opt_.step();
          opt_.zero_grad();
        }
      }
      std::cout << "epoch " << epoch << " loss " << (running / batches).item<float>() << '\n';
    }
  }

private:
  TopicNet model_;
  AccumConfig cfg_;
  torch::optim::AdamW opt_;
};

// The smaller baseline: the same accumulation, written as the recipe says.
void train_baseline(TopicNet &model, const Corpus &train, int64_t accum_steps, int epochs) {
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  int64_t micro = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    model->train();
    for (int64_t start = 0; start + 32 <= train.size(); start += 32) {
      auto logits = model->forward(train.tokens.narrow(0, start, 32));
      auto loss = torch::nn::functional::cross_entropy(logits, train.topics.narrow(0, start, 32));
      // OK(torch-grad-accumulation-unscaled): divided by the micro-batches per update.
      (loss / accum_steps).backward();
      if ((micro + 1) % accum_steps == 0) {
        // OK(torch-missing-zero-grad): step and reset share the condition.
        opt.step();
        opt.zero_grad();
      }
      ++micro;
    }
  }
}

int main(int argc, char **argv) {
  torch::manual_seed(7);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Corpus train = synth_corpus(4096, device), val = synth_corpus(1024, device);

  TopicNet model(128, 0.3);
  model->to(device);
  torch::optim::SGD head_opt(model->head->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  warmup_head(model, head_opt, train, 50);
  model->eval();
  std::cout << "after warm-up acc " << topic_accuracy(model, val) << '\n';

  AccumConfig cfg;
  if (argc > 1)
    cfg.accum_steps = std::stoll(argv[1]);
  AccumTrainer trainer(model, cfg);
  trainer.fit(train);
  model->eval();
  std::cout << "full recipe acc " << topic_accuracy(model, val) << '\n';

  TopicNet baseline(32, 0.1);
  baseline->to(device);
  train_baseline(baseline, train, cfg.accum_steps, cfg.epochs);
  baseline->eval();
  std::cout << "baseline acc " << topic_accuracy(baseline, val) << '\n';
}
