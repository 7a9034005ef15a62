// German-English news translation with a small encoder-decoder transformer.
// Float16 pretraining with a hand-written LossScaler (the AmpGuard sits in a
// std::optional engaged only when cfg.amp is set), bfloat16 in-domain
// fine-tuning with gradient accumulation (the loss factory pre-divides), a
// back-translation round, a length probe, greedy decoding.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>
namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define MT_CUDA_AUTOCAST(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#else
#define MT_CUDA_AUTOCAST(on) at::autocast::set_enabled(on)
#endif
constexpr int64_t kVocab = 512, kPad = 0, kBos = 1, kEos = 2, kModel = 64;

namespace amp {
struct State { bool on; at::ScalarType dtype; };
inline State capture() {
#if TORCH_VERSION_MAJOR >= 2
  return {at::autocast::is_autocast_enabled(at::kCUDA), at::autocast::get_autocast_dtype(at::kCUDA)};
#else
  return {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
#endif
}
inline void apply(const State& s) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(at::kCUDA, s.dtype);
  at::autocast::set_autocast_enabled(at::kCUDA, s.on);
#else
  at::autocast::set_autocast_gpu_dtype(s.dtype);
  at::autocast::set_enabled(s.on);
#endif
}
}  // namespace amp
// Saves both the enabled flag and the dtype, restores both on scope exit.
class AmpGuard {
 public:
  explicit AmpGuard(at::ScalarType dtype) : saved_(amp::capture()) { amp::apply({true, dtype}); }
  ~AmpGuard() { amp::apply(saved_); }
  AmpGuard(const AmpGuard&) = delete;
  AmpGuard& operator=(const AmpGuard&) = delete;
 private:
  amp::State saved_;
};
class LossScaler {
 public:
  explicit LossScaler(double scale) : scale_(scale) {}
  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  void unscale(const std::vector<torch::Tensor>& params) const {
    for (const auto& p : params)
      if (p.grad().defined())
        p.mutable_grad().div_(scale_);
  }
 private:
  double scale_;
};
struct TranslatorImpl : nn::Module {
  TranslatorImpl()
      : src_embed(register_module("src_embed", nn::Embedding(kVocab, kModel))),
        tgt_embed(register_module("tgt_embed", nn::Embedding(kVocab, kModel))),
        core(register_module("core", nn::Transformer(nn::TransformerOptions(kModel, 4, 2, 2).dim_feedforward(128).dropout(0.1)))),
        proj(register_module("proj", nn::Linear(kModel, kVocab))) {}
  // src [S, B], tgt_in [T, B] -> logits [T, B, V]
  torch::Tensor forward(const torch::Tensor& src, const torch::Tensor& tgt_in) {
    auto mask = nn::TransformerImpl::generate_square_subsequent_mask(tgt_in.size(0)).to(src.device());
    return proj(core->forward(src_embed(src), tgt_embed(tgt_in), torch::Tensor(), mask));
  }
  nn::Embedding src_embed, tgt_embed;
  nn::Transformer core;
  nn::Linear proj;
};
TORCH_MODULE(Translator);
struct PairBatch {
  torch::Tensor src, tgt_in, tgt_out;
  bool length_outlier = false;  // set by the bucketing loader on the host
};
struct MtConfig {
  bool amp = true;
  int64_t accum = 4, epochs = 2;
  double lr = 5e-4, smoothing = 0.1;
};
using TokenLoss = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>;

// Label-smoothed token loss, already divided for `accum` micro-batches.
TokenLoss make_token_loss(int64_t accum, double smoothing) {
  return [accum, smoothing](const torch::Tensor& logits, const torch::Tensor& gold) {
    auto ce = F::cross_entropy(logits.reshape({-1, kVocab}), gold.reshape({-1}),
                               F::CrossEntropyFuncOptions().ignore_index(kPad).label_smoothing(smoothing));
    return ce / static_cast<double>(accum);
  };
}
torch::Tensor plain_token_loss(Translator& model, const PairBatch& b) {
  return F::cross_entropy(model->forward(b.src, b.tgt_in).reshape({-1, kVocab}), b.tgt_out.reshape({-1}),
                          F::CrossEntropyFuncOptions().ignore_index(kPad));
}
void pretrain(Translator& model, const std::vector<PairBatch>& data, const MtConfig& cfg, const LossScaler& scaler) {
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(cfg.lr).betas({0.9, 0.98}));
  auto token_loss = make_token_loss(1, cfg.smoothing);
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    for (size_t i = 0; i < data.size(); ++i) {
      const auto& b = data[i];
      opt.zero_grad();
      std::optional<AmpGuard> amp;
      if (cfg.amp)
        amp.emplace(at::kHalf);
      auto loss = token_loss(model->forward(b.src, b.tgt_in), b.tgt_out);
      amp.reset();
      // OK(torch-autocast-region): guard reset above; the float16 loss is scaled.
      scaler.scale(loss).backward();
      scaler.unscale(model->parameters());
      nn::utils::clip_grad_norm_(model->parameters(), 1.0);
      opt.step();
      if (i % 100 == 0)
        std::cout << "pretrain " << epoch << ":" << i << " loss " << loss.item<double>() << '\n';
    }
  }
}
void finetune_in_domain(Translator& model, const std::vector<PairBatch>& data, const MtConfig& cfg) {
  model->train();
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(cfg.lr * 0.2));
  auto token_loss = make_token_loss(cfg.accum, cfg.smoothing);
  opt.zero_grad();
  for (size_t i = 0; i < data.size(); ++i) {
    const auto& b = data[i];
    torch::Tensor loss;
    {
      // OK(torch-autocast-region): the guard restores the state on the `continue`.
      AmpGuard amp(at::kBFloat16);
      if (b.length_outlier)
        continue;
      loss = token_loss(model->forward(b.src, b.tgt_in), b.tgt_out);
    }
    // OK(torch-autocast-region, torch-grad-accumulation-unscaled): a bfloat16
    // region needs no scaling; the factory's lambda divides by cfg.accum.
    loss.backward();
    if ((i + 1) % cfg.accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}
class BacktranslationStage {
 public:
  BacktranslationStage(Translator model, int64_t accum)
      : model_(std::move(model)), opt_(model_->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)), accum_(accum) {}
  void run(const std::vector<PairBatch>& synthetic) {
    model_->train();
    opt_.zero_grad();
    for (const auto& b : synthetic) {
      auto loss = plain_token_loss(model_, b);
      // BUG(torch-grad-accumulation-unscaled): a mean token loss, accum_ of them per step.
      loss.backward();
      if (++micro_ == accum_) {
        micro_ = 0;
        opt_.step();
        opt_.zero_grad();
      }
    }
  }
 private:
  Translator model_;
  torch::optim::SGD opt_;
  int64_t accum_, micro_ = 0;
};

// Auxiliary target-length regressor on the encoder's mean state.
void fit_length_probe(Translator& model, nn::Linear& probe, const std::vector<PairBatch>& data) {
  model->eval();
  probe->train();
  torch::optim::Adam opt(probe->parameters(), torch::optim::AdamOptions(1e-3));
  for (const auto& b : data) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      AmpGuard amp(at::kHalf);
      torch::Tensor memory;
      {
        torch::NoGradGuard no_grad;
        memory = model->core->encoder.forward(model->src_embed(b.src)).mean(0);
      }
      auto target_len = (b.tgt_out != kPad).sum(0).to(torch::kFloat).unsqueeze(1);
      loss = 0.5 * F::mse_loss(probe(memory), target_len);
    }
    // BUG(torch-autocast-region): a float16 mean loss (times 0.5), never scaled.
    loss.backward();
    opt.step();
  }
}
torch::Tensor greedy_translate(Translator& model, const torch::Tensor& src, int64_t max_len) {
  torch::NoGradGuard no_grad;
  auto out = torch::full({1, src.size(1)}, kBos, src.options());
  // BUG(torch-autocast-region): the early return on all-EOS leaves autocast on.
  MT_CUDA_AUTOCAST(true);
  for (int64_t t = 0; t < max_len; ++t) {
    auto next = model->forward(src, out).select(0, -1).argmax(-1).unsqueeze(0);
    out = torch::cat({out, next}, 0);
    if ((out == kEos).any(0).all().item<bool>())
      return out;
  }
  MT_CUDA_AUTOCAST(false);
  return out;
}

// Teacher-forced token accuracy; batches without any target token are skipped.
double token_accuracy(Translator& model, const PairBatch& b) {
  torch::NoGradGuard no_grad;
  const auto saved = amp::capture();
  // OK(torch-autocast-region): every exit restores the captured state.
  amp::apply({true, at::kHalf});
  auto keep = b.tgt_out != kPad;
  if (keep.sum().item<int64_t>() == 0) {
    amp::apply(saved);
    return 0.0;
  }
  auto pred = model->forward(b.src, b.tgt_in).argmax(-1);
  amp::apply(saved);
  return (pred.eq(b.tgt_out) & keep).sum().item<double>() / keep.sum().item<double>();
}
std::vector<PairBatch> make_pairs(int64_t n, torch::Device device) {
  std::vector<PairBatch> out;
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  for (int64_t i = 0; i < n; ++i) {
    auto tgt = torch::randint(3, kVocab, {13, 16}, opts);
    out.push_back({torch::randint(3, kVocab, {12, 16}, opts), tgt.slice(0, 0, 12), tgt.slice(0, 1, 13), i % 17 == 0});
  }
  return out;
}
int main() {
  torch::manual_seed(408);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  MtConfig cfg;
  cfg.amp = device.is_cuda();
  Translator model;
  model->to(device);
  pretrain(model, make_pairs(200, device), cfg, LossScaler(1024.0));
  finetune_in_domain(model, make_pairs(64, device), cfg);
  BacktranslationStage bt(model, cfg.accum);
  bt.run(make_pairs(48, device));
  nn::Linear probe(kModel, 1);
  probe->to(device);
  fit_length_probe(model, probe, make_pairs(32, device));
  model->eval();
  auto dev_set = make_pairs(4, device);
  for (const auto& b : dev_set)
    std::cout << "token accuracy " << token_accuracy(model, b) << '\n';
  auto hyp = greedy_translate(model, dev_set.front().src, 20);
  std::cout << "hypothesis length " << hyp.size(0) << '\n';
}
