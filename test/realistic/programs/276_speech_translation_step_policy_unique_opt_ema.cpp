// Direct speech-to-text translation (English audio -> German text) with a
// small conv + GRU encoder, an attention GRU decoder and an auxiliary
// frame-level phone head. The encoder is pretrained on the phone task first,
// then the whole model is fine-tuned on translation with gradient
// accumulation decided by a StepPolicy object. Optimizers are built by a
// factory from the run config and owned through std::unique_ptr.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kMels = 80, kPhones = 48, kTgtVocab = 500, kBos = 1, kEos = 2;

struct RunConfig {
  std::string optimizer = "adamw";
  double pretrain_lr = 1e-3, st_lr = 3e-4;
  int pretrain_epochs = 2, st_epochs = 3;
  int64_t accum_every = 4, log_every = 25, max_decode = 40;
};

struct SpeechTranslatorImpl : nn::Module {
  SpeechTranslatorImpl(int64_t d)
      : dim(d),
        subsample(register_module("subsample", nn::Conv1d(nn::Conv1dOptions(kMels, d, 3).stride(2).padding(1)))),
        encoder(register_module("encoder", nn::GRU(nn::GRUOptions(d, d).batch_first(true)))),
        embed(register_module("embed", nn::Embedding(kTgtVocab, d))),
        decoder(register_module("decoder", nn::GRU(nn::GRUOptions(d, d).batch_first(true)))),
        drop(register_module("drop", nn::Dropout(0.2))),
        phone_head(register_module("phone_head", nn::Linear(d, kPhones))),
        out(register_module("out", nn::Linear(2 * d, kTgtVocab))) {}

  // feats [B, T, kMels] -> encoder states [B, T/2, d]
  torch::Tensor encode(const torch::Tensor& feats) {
    auto h = torch::relu(subsample->forward(feats.transpose(1, 2))).transpose(1, 2);
    return std::get<0>(encoder->forward(drop->forward(h)));
  }
  torch::Tensor phone_logits(const torch::Tensor& feats) { return phone_head->forward(drop->forward(encode(feats))); }
  // Teacher-forced decoder logits [B, U, kTgtVocab] for the shifted targets.
  torch::Tensor forward(const torch::Tensor& feats, const torch::Tensor& prev_tokens) {
    auto enc = encode(feats);
    auto dec = std::get<0>(decoder->forward(embed->forward(prev_tokens)));
    auto attn = torch::softmax(torch::bmm(dec, enc.transpose(1, 2)) / std::sqrt(static_cast<double>(dim)), -1);
    return out->forward(drop->forward(torch::cat({dec, torch::bmm(attn, enc)}, -1)));
  }

  int64_t dim;
  nn::Conv1d subsample;
  nn::GRU encoder;
  nn::Embedding embed;
  nn::GRU decoder;
  nn::Dropout drop;
  nn::Linear phone_head, out;
};
TORCH_MODULE(SpeechTranslator);

struct Utterance {
  torch::Tensor feats;    // [B, T, kMels]
  torch::Tensor phones;   // [B, T/2] frame-level phone ids
  torch::Tensor tgt_in;   // [B, U] BOS + translation
  torch::Tensor tgt_out;  // [B, U] translation + EOS
};

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& kind, std::vector<torch::Tensor> params,
                                                        double lr) {
  if (kind == "sgd")
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(lr).momentum(0.9));
  return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(lr).weight_decay(0.01));
}

void clear_grads(torch::optim::Optimizer* opt) { opt->zero_grad(); }

torch::Tensor flat_xent(const torch::Tensor& logits, const torch::Tensor& targets) {
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

// Decides on which micro-batches the accumulated gradients are applied.
class StepPolicy {
 public:
  explicit StepPolicy(int64_t every) : every_(every) {}
  bool should_step(int64_t micro) const { return (micro + 1) % every_ == 0; }
  bool should_log(int64_t micro) const { return micro % log_every_ == 0; }
  void set_log_every(int64_t n) { log_every_ = n; }

 private:
  int64_t every_;
  int64_t log_every_ = 25;
};

void pretrain_encoder(SpeechTranslator model, const std::vector<Utterance>& data, const RunConfig& cfg) {
  auto opt = make_optimizer(cfg.optimizer, model->parameters(), cfg.pretrain_lr);
  model->train();
  for (int epoch = 0; epoch < cfg.pretrain_epochs; ++epoch) {
    clear_grads(opt.get());
    auto epoch_loss = torch::zeros({}, data.front().feats.options());
    for (const auto& u : data) {
      auto loss = flat_xent(model->phone_logits(u.feats), u.phones);
      loss.backward();
      // BUG(torch-missing-zero-grad): clear_grads() runs once per epoch, so
      // every later step of the epoch re-applies all earlier batches' grads.
      opt->step();
      // OK(torch-loss-accumulation-graph): detached before the sum.
      epoch_loss += loss.detach();
    }
    std::cout << "pretrain epoch " << epoch << " phone CE " << (epoch_loss / double(data.size())).item<double>() << '\n';
  }
}

class StTrainer {
 public:
  StTrainer(SpeechTranslator model, const RunConfig& cfg, torch::Device device)
      : model_(std::move(model)), cfg_(cfg), device_(device), policy_(cfg.accum_every),
        opt_(make_optimizer(cfg.optimizer, model_->parameters(), cfg.st_lr)),
        ema_loss_(torch::zeros({}, torch::TensorOptions().device(device))) {
    policy_.set_log_every(cfg.log_every);
  }

  void fit(const std::vector<Utterance>& data) {
    model_->train();
    clear_grads(opt_.get());
    int64_t micro = 0;
    auto count_correct = [&](const torch::Tensor& logits, const torch::Tensor& tgt) {
      // BUG(torch-host-sync-in-loop): called on every micro-batch; the
      // logits live on device_, the CUDA device when there is one.
      correct_ += logits.argmax(-1).eq(tgt).sum().item<int64_t>();
      seen_ += tgt.numel();
    };
    for (int epoch = 0; epoch < cfg_.st_epochs; ++epoch) {
      for (const auto& u : data) {
        auto logits = model_->forward(u.feats, u.tgt_in);
        auto loss = flat_xent(logits, u.tgt_out);
        // BUG(torch-grad-accumulation-unscaled): accum_every mean losses add
        // up before the policy lets the step run, never divided.
        loss.backward();
        // BUG(torch-loss-accumulation-graph): an EMA of the attached loss in
        // a member: each step's graph hangs off the next one's.
        ema_loss_ = 0.9 * ema_loss_ + 0.1 * loss;
        count_correct(logits, u.tgt_out);
        if (policy_.should_step(micro)) {
          // OK(torch-missing-zero-grad): reset under the same condition.
          opt_->step();
          clear_grads(opt_.get());
        }
        if (policy_.should_log(micro))
          // OK(torch-host-sync-in-loop): only every log_every micro-batches.
          std::cout << "micro " << micro << " smoothed CE " << ema_loss_.item<double>() << '\n';
        ++micro;
      }
      std::cout << "epoch " << epoch << " token acc " << double(correct_) / double(seen_ + 1) << '\n';
    }
  }

 private:
  SpeechTranslator model_;
  RunConfig cfg_;
  torch::Device device_;
  StepPolicy policy_;
  std::unique_ptr<torch::optim::Optimizer> opt_;
  torch::Tensor ema_loss_;
  int64_t correct_ = 0, seen_ = 0;
};

// Dev-set cross-entropy, for the checkpoint log.
double corpus_loss(SpeechTranslator model, const std::vector<Utterance>& dev) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto total = torch::zeros({});
  for (const auto& u : dev) {
    // OK(torch-loss-accumulation-graph, torch-eval-mode-missing): no graph under the guard; eval() above.
    total += flat_xent(model->forward(u.feats, u.tgt_in), u.tgt_out).cpu();
  }
  return total.item<double>() / static_cast<double>(dev.size());
}

// Greedy translation of one utterance.
std::vector<int64_t> translate(SpeechTranslator& model, const torch::Tensor& feats, int64_t max_len) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> tokens{kBos};
  while (static_cast<int64_t>(tokens.size()) < max_len) {
    auto prev = torch::tensor(tokens, torch::kLong).unsqueeze(0).to(feats.device());
    // BUG(torch-eval-mode-missing): the trainer's fit() switched the shared
    // module back to train() after corpus_loss(): dropout in decoding.
    auto logits = model->forward(feats, prev);
    const int64_t next = logits[0][-1].argmax().item<int64_t>();
    tokens.push_back(next);
    if (next == kEos)
      break;
  }
  return tokens;
}

std::vector<Utterance> synth_corpus(int64_t n, torch::Device device) {
  auto opts = torch::TensorOptions().device(device);
  std::vector<Utterance> out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t frames = 120, words = 16;
    out.push_back({torch::randn({8, frames, kMels}, opts), torch::randint(kPhones, {8, frames / 2}, opts.dtype(torch::kLong)),
                   torch::randint(3, kTgtVocab, {8, words}, opts.dtype(torch::kLong)),
                   torch::randint(3, kTgtVocab, {8, words}, opts.dtype(torch::kLong))});
  }
  return out;
}

int main() {
  torch::manual_seed(276);
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  RunConfig cfg;
  SpeechTranslator model(192);
  model->to(device);
  const auto train = synth_corpus(48, device);
  const auto dev = synth_corpus(6, device);

  pretrain_encoder(model, train, cfg);
  std::cout << "dev CE after pretraining " << corpus_loss(model, dev) << '\n';

  StTrainer trainer(model, cfg, device);
  trainer.fit(train);

  const auto hyp = translate(model, dev.front().feats.slice(0, 0, 1), cfg.max_decode);
  std::cout << "hypothesis length " << hyp.size() << '\n';
  std::cout << "dev CE after fine-tuning " << corpus_loss(model, dev) << '\n';
}
