// Speech recognition with CTC: 80-bin log-mel frames go through a frontend
// assembled at run time from a spec ("proj,gelu,norm"), then a
// feed-forward encoder with dropout predicts characters per frame. Training
// accumulates utterance batches under bfloat16 autocast; after each epoch a
// sample transcript is printed and the token error rate is measured.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define ASR_AMP_IS_ON() at::autocast::is_autocast_enabled(at::kCUDA)
#define ASR_AMP(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define ASR_AMP_DTYPE() at::autocast::get_autocast_dtype(at::kCUDA)
#define ASR_SET_AMP_DTYPE(t) at::autocast::set_autocast_dtype(at::kCUDA, (t))
#else
#define ASR_AMP_IS_ON() at::autocast::is_enabled()
#define ASR_AMP(on) at::autocast::set_enabled(on)
#define ASR_AMP_DTYPE() at::autocast::get_autocast_gpu_dtype()
#define ASR_SET_AMP_DTYPE(t) at::autocast::set_autocast_gpu_dtype(t)
#endif

constexpr int64_t kMels = 80, kVocab = 32, kFrames = 200, kLabels = 20;

class Frontend {
 public:
  explicit Frontend(const std::vector<std::string>& spec)
      : mean_(torch::full({kMels}, -4.0)), std_(torch::full({kMels}, 3.0)) {
    for (const auto& s : spec) {
      if (s == "proj") { stages_.emplace_back(nn::Linear(width_, 256)); width_ = 256; }
      else if (s == "gelu") stages_.emplace_back(nn::GELU());
      else if (s == "norm") stages_.emplace_back(nn::LayerNorm(nn::LayerNormOptions({width_})));
    }
  }
  void to(const torch::Device& d) {
    for (auto& stage : stages_)
      // OK(torch-tensor-to-discarded): Module::to moves each stage in place.
      stage.ptr()->to(d);
    // OK(torch-tensor-to-discarded): the converted statistics are assigned back.
    for (auto* t : {&mean_, &std_}) *t = t->to(d);
  }
  torch::Tensor run(torch::Tensor x) {
    // OK(torch-device-mismatch): to() moved the statistics with the stages.
    x = (x - mean_) / std_;
    for (auto& stage : stages_)
      // OK(torch-device-mismatch): every stage of the vector was moved by the range-for in to().
      x = stage.forward(x);
    return x;
  }
  std::vector<torch::Tensor> parameters() const {
    std::vector<torch::Tensor> out;
    for (const auto& stage : stages_) for (const auto& p : stage.ptr()->parameters()) out.push_back(p);
    return out;
  }
  int64_t width() const { return width_; }
  std::vector<nn::AnyModule> stages_;
  torch::Tensor mean_, std_;
  int64_t width_ = kMels;
};

struct EncoderImpl : nn::Module {
  EncoderImpl(int64_t in, int64_t hidden, double p)
      : ff1(register_module("ff1", nn::Linear(in, hidden))), ff2(register_module("ff2", nn::Linear(hidden, hidden))),
        head(register_module("head", nn::Linear(hidden, kVocab))),
        norm(register_module("norm", nn::LayerNorm(nn::LayerNormOptions({hidden})))),
        drop(register_module("drop", nn::Dropout(p))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = norm(torch::relu(ff1(x)));
    h = h + drop(torch::relu(ff2(h)));
    return head(drop(h));  // [B, T, vocab]
  }
  nn::Linear ff1, ff2, head;
  nn::LayerNorm norm;
  nn::Dropout drop;
};
TORCH_MODULE(Encoder);

struct Utterances {
  torch::Tensor features, targets, enc_lengths, target_lengths;  // device
  torch::Tensor ref_ids;                                          // host copy of the transcripts
};

// bfloat16 CUDA autocast for a scope; the destructor restores state and dtype.
class Bf16Autocast {
 public:
  Bf16Autocast() : was_on_(ASR_AMP_IS_ON()), dtype_(ASR_AMP_DTYPE()) {
    ASR_SET_AMP_DTYPE(at::kBFloat16);
    // OK(torch-autocast-region): RAII; the destructor closes the region on every path, a throw included.
    ASR_AMP(true);
  }
  ~Bf16Autocast() {
    ASR_AMP(was_on_);
    ASR_SET_AMP_DTYPE(dtype_);
  }
  bool was_on_;
  at::ScalarType dtype_;
};

class CtcTrainer {
 public:
  CtcTrainer(Frontend& frontend, Encoder encoder, int accum)
      : encoder_(encoder), opt_(joint(frontend, encoder), torch::optim::AdamWOptions(3e-4)), accum_(accum) {
    loss_fn_ = [this, &frontend](const Utterances& b) {
      auto logp = encoder_->forward(frontend.run(b.features)).log_softmax(-1).transpose(0, 1);
      return F::ctc_loss(logp, b.targets, b.enc_lengths, b.target_lengths);
    };
  }
  double fit_epoch(const std::vector<Utterances>& data) {
    encoder_->train();
    opt_.zero_grad();
    auto total = torch::zeros({}, data.front().features.options());
    for (const auto& b : data) {
      torch::Tensor loss;
      {
        Bf16Autocast amp;
        if (b.features.size(1) < b.targets.size(1)) throw std::runtime_error("transcript longer than the audio");
        loss = loss_fn_(b);
      }
      // BUG(torch-grad-accumulation-unscaled): loss_fn_ returns CTC's batch mean; accum_ of them add up per step.
      // OK(torch-autocast-region): the scope closed the bfloat16 region before backward().
      loss.backward();
      // OK(torch-loss-accumulation-graph): detached.
      total += loss.detach();
      ++micro_;
      if (micro_ == accum_) {
        // OK(torch-missing-zero-grad): reset right after the step, under the same condition.
        opt_.step();
        opt_.zero_grad();
        micro_ = 0;
        if (++updates_ % 100 == 0)
          // OK(torch-host-sync-in-loop): every hundredth update.
          std::cout << "update " << updates_ << " ctc " << loss.item<double>() << '\n';
      }
    }
    return total.item<double>() / static_cast<double>(data.size());
  }

 private:
  static std::vector<torch::Tensor> joint(const Frontend& f, const Encoder& e) {
    auto params = f.parameters();
    for (const auto& p : e->parameters()) params.push_back(p);
    return params;
  }
  Encoder encoder_;
  torch::optim::AdamW opt_;
  std::function<torch::Tensor(const Utterances&)> loss_fn_;
  int accum_, micro_ = 0, updates_ = 0;
};

void wait_for_device() { if (torch::cuda::is_available()) torch::cuda::synchronize(); }

std::string collapse(const torch::TensorAccessor<int64_t, 1>& ids) {
  std::string out;
  int64_t prev = 0;
  for (int64_t t = 0; t < ids.size(0); ++t) {
    if (ids[t] != 0 && ids[t] != prev) out.push_back(static_cast<char>('a' + (ids[t] - 1) % 26));
    prev = ids[t];
  }
  return out;
}

class GreedyDecoder {
 public:
  GreedyDecoder(Frontend& frontend, Encoder encoder) : frontend_(frontend), encoder_(encoder) {}
  std::string transcribe(const torch::Tensor& features) {
    torch::NoGradGuard no_grad;
    // BUG(torch-eval-mode-missing): the decoder's encoder_ is the trainer's module, left in train() by fit_epoch().
    auto ids = encoder_->forward(frontend_.run(features)).argmax(-1);
    auto host = ids.to(torch::kCPU, /*non_blocking=*/true);
    wait_for_device();
    // OK(torch-non-blocking-d2h-race): wait_for_device() synchronised after the copy.
    auto acc = host.accessor<int64_t, 2>();
    return collapse(acc[0]);
  }
  Frontend& frontend_;
  Encoder encoder_;
};

class EvalScope {
 public:
  explicit EvalScope(nn::Module& m) : module_(m), was_training_(m.is_training()) { module_.eval(); }
  ~EvalScope() { module_.train(was_training_); }
  nn::Module& module_;
  bool was_training_;
};

// Reference characters that the collapsed hypothesis misses position by position.
int64_t token_errors(const torch::Tensor& hyp, const torch::Tensor& ref) {
  int64_t errors = 0;
  auto h = hyp.accessor<int64_t, 2>();
  auto r = ref.accessor<int64_t, 2>();
  for (int64_t i = 0; i < r.size(0); ++i) {
    std::string hyp_s = collapse(h[i]);
    for (int64_t j = 0; j < r.size(1); ++j)
      errors += j >= static_cast<int64_t>(hyp_s.size()) || hyp_s[j] != static_cast<char>('a' + (r[i][j] - 1) % 26);
  }
  return errors;
}

struct DecodeJob {
  torch::Tensor ids, refs;
};

double validate(Frontend& frontend, Encoder& encoder, const std::vector<Utterances>& val) {
  EvalScope scope(*encoder);
  torch::NoGradGuard no_grad;
  int64_t errors = 0, tokens = 0;
  for (const auto& b : val) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): EvalScope switched to eval(); no-grad guard.
    auto ids = encoder->forward(frontend.run(b.features)).argmax(-1);
    DecodeJob job{ids.to(torch::kCPU, /*non_blocking=*/true), b.ref_ids};
    // BUG(torch-non-blocking-d2h-race): job.ids is read by token_errors() while its copy may still be in flight.
    errors += token_errors(job.ids, job.refs);
    tokens += job.refs.numel();
  }
  return static_cast<double>(errors) / static_cast<double>(std::max<int64_t>(tokens, 1));
}

std::vector<Utterances> synth(int batches, int64_t n, const torch::Device& device) {
  std::vector<Utterances> out;
  auto lopt = torch::TensorOptions().dtype(torch::kLong);
  for (int i = 0; i < batches; ++i) {
    auto refs = torch::randint(1, kVocab, {n, kLabels}, lopt);
    out.push_back({torch::randn({n, kFrames, kMels}, device) - 4.0, refs.to(device),
                   torch::full({n}, kFrames, lopt.device(device)), torch::full({n}, kLabels, lopt.device(device)),
                   refs});
  }
  return out;
}

int main() {
  torch::manual_seed(330);
  torch::Device device(torch::kCPU);
  // OK(torch-cuda-unguarded): selected only when CUDA is available; CPU otherwise.
  if (torch::cuda::is_available()) device = torch::Device(torch::kCUDA);
  Frontend frontend({"proj", "gelu", "norm"});
  frontend.to(device);
  Encoder encoder(frontend.width(), 384, 0.15);
  encoder->to(device);
  CtcTrainer trainer(frontend, encoder, 4);
  GreedyDecoder decoder(frontend, encoder);
  auto train = synth(48, 16, device);
  auto val = synth(4, 32, device);
  for (int epoch = 0; epoch < 4; ++epoch) {
    double ctc = trainer.fit_epoch(train);
    std::string sample = decoder.transcribe(val.front().features.narrow(0, 0, 1));
    double ter = validate(frontend, encoder, val);
    std::cout << "epoch " << epoch << " ctc " << ctc << " sample '" << sample << "' TER " << ter << '\n';
  }
}
