// Image captioning (CNN encoder, LSTM decoder) trained with teacher forcing
// and gradient accumulation, validated every epoch, then a beam search over
// a test image. Results come back to the host through one helper that starts
// the copy without waiting; the training loss is smoothed over a window of
// recent steps for the log. `--profile` times the encoder first.
#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kVocab = 8000, kEmb = 256, kHid = 512, kMaxLen = 16, kPad = 0, kBos = 1, kBeam = 3;

struct Config {
  int64_t epochs = 5, steps_per_epoch = 500, batch = 32, accum = 4, log_every = 100;
  double lr = 2e-4;
  bool profile = false;
};

Config parse_args(int argc, char **argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--profile") cfg.profile = true;
    else if (a == "--accum" && i + 1 < argc) cfg.accum = std::stoll(argv[++i]);
    else if (a == "--epochs" && i + 1 < argc) cfg.epochs = std::stoll(argv[++i]);
  }
  return cfg;
}

struct CaptionNetImpl : torch::nn::Module {
  CaptionNetImpl()
      : encoder(register_module("encoder", torch::nn::Sequential(
                                               torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).stride(2)),
                                               torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                                               torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).stride(2)),
                                               torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1), torch::nn::Flatten(),
                                               torch::nn::Linear(64, kHid)))),
        embed(register_module("embed", torch::nn::Embedding(kVocab, kEmb))),
        cell(register_module("cell", torch::nn::LSTMCell(kEmb, kHid))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        out(register_module("out", torch::nn::Linear(kHid, kVocab))) {}

  std::pair<torch::Tensor, torch::Tensor> init_state(const torch::Tensor &images) {
    auto h = torch::tanh(encoder->forward(images));
    return {h, torch::zeros_like(h)};
  }
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> decode_step(const torch::Tensor &tok, const torch::Tensor &h,
                                                                      const torch::Tensor &c) {
    auto hc = cell->forward(embed->forward(tok), std::make_tuple(h, c));
    return {out->forward(drop->forward(std::get<0>(hc))), std::get<0>(hc), std::get<1>(hc)};
  }
  // Teacher forcing: captions [B, L] -> logits [B, L - 1, V].
  torch::Tensor forward(const torch::Tensor &images, const torch::Tensor &captions) {
    auto [h, c] = init_state(images);
    std::vector<torch::Tensor> steps;
    for (int64_t t = 0; t + 1 < captions.size(1); ++t) {
      // OK(torch-inference-without-no-grad): the training loss backpropagates
      // through every decoding step.
      auto [logits, h2, c2] = decode_step(captions.select(1, t), h, c);
      h = h2;
      c = c2;
      // OK(torch-loss-accumulation-graph): the steps are stacked into this
      // forward's output, which backward() needs whole.
      steps.push_back(logits);
    }
    return torch::stack(steps, 1);
  }
  torch::nn::Sequential encoder;
  torch::nn::Embedding embed;
  torch::nn::LSTMCell cell;
  torch::nn::Dropout drop;
  torch::nn::Linear out;
};
TORCH_MODULE(CaptionNet);

struct CaptionBatch {
  torch::Tensor images;    // [B, 3, 128, 128]
  torch::Tensor captions;  // [B, kMaxLen + 1], BOS first, PAD after EOS
};

CaptionBatch next_batch(int64_t b) {
  auto caps = torch::randint(3, kVocab, {b, kMaxLen + 1}, torch::kLong);
  caps.select(1, 0).fill_(kBos);
  return {torch::rand({b, 3, 128, 128}), caps};
}

// Starts the copy back to the host; callers synchronise before reading.
torch::Tensor to_host_async(const torch::Tensor &t) { return t.to(torch::kCPU, /*non_blocking=*/true); }

void wait_for_device() {
  if (torch::cuda::is_available()) torch::cuda::synchronize();
}

struct StepState {
  int64_t micro = 0, accum = 1, updates = 0;
};
bool at_boundary(StepState &s) { return ++s.micro % s.accum == 0; }

class SmoothedLoss {
 public:
  void observe(const torch::Tensor &loss) {
    // BUG(torch-loss-accumulation-graph): the window keeps the last 100
    // training losses with their whole unrolled decoder graphs.
    recent_.push_back(loss);
    if (recent_.size() > 100) recent_.pop_front();
  }
  double value() const { return torch::stack(std::vector<torch::Tensor>(recent_.begin(), recent_.end())).mean().item<double>(); }

 private:
  std::deque<torch::Tensor> recent_;
};

class Engine {
 public:
  Engine(const Config &cfg, torch::Device device) : cfg_(cfg), device_(device) {
    model_->to(device_);
    opt_ = std::make_shared<torch::optim::Adam>(model_->parameters(), torch::optim::AdamOptions(cfg.lr));
    state_.accum = cfg.accum;
  }
  CaptionNet &model() { return model_; }

  void fit() {
    model_->train();
    opt_->zero_grad();
    for (int64_t epoch = 0; epoch < cfg_.epochs; ++epoch) {
      for (int64_t i = 0; i < cfg_.steps_per_epoch; ++i) {
        auto batch = next_batch(cfg_.batch);
        auto caps = batch.captions.to(device_);
        auto logits = model_->forward(batch.images.to(device_), caps);
        auto loss = F::cross_entropy(logits.reshape({-1, kVocab}), caps.slice(1, 1).reshape({-1}),
                                     F::CrossEntropyFuncOptions().ignore_index(kPad));
        // BUG(torch-grad-accumulation-unscaled): a mean loss per micro-batch,
        // and the update comes every `accum` micro-batches.
        loss.backward();
        smoother_.observe(loss);
        if (at_boundary(state_)) {
          torch::nn::utils::clip_grad_norm_(model_->parameters(), 5.0);
          // OK(torch-missing-zero-grad): reset with the update.
          opt_->step();
          opt_->zero_grad();
          ++state_.updates;
        }
        if (i % cfg_.log_every == 0)
          // OK(torch-host-sync-in-loop): value() reads only on logging steps.
          std::cout << "epoch " << epoch << " step " << i << " loss " << smoother_.value() << "\n";
      }
      std::cout << "epoch " << epoch << " val nll/token " << validate(8) << " after " << state_.updates << " updates\n";
    }
  }

 private:
  double validate(int64_t batches) {
    torch::NoGradGuard no_grad;
    model_->eval();
    double total = 0.0;
    int64_t tokens = 0;
    for (int64_t b = 0; b < batches; ++b) {
      auto batch = next_batch(cfg_.batch);
      auto caps = batch.captions.to(device_);
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval()
      // and a NoGradGuard above.
      auto logits = model_->forward(batch.images.to(device_), caps);
      auto nll = F::cross_entropy(logits.reshape({-1, kVocab}), caps.slice(1, 1).reshape({-1}),
                                  F::CrossEntropyFuncOptions().ignore_index(kPad).reduction(torch::kSum));
      auto host = to_host_async(nll);
      // OK(torch-host-sync-in-loop): validation batches, no training step.
      wait_for_device();
      // OK(torch-non-blocking-d2h-race): wait_for_device() synchronised.
      total += host.item<double>();
      tokens += cfg_.batch * kMaxLen;
    }
    model_->train();
    return total / static_cast<double>(tokens);
  }

  Config cfg_;
  torch::Device device_;
  CaptionNet model_;
  std::shared_ptr<torch::optim::Adam> opt_;
  StepState state_;
  SmoothedLoss smoother_;
};

struct DecodeResult {
  torch::Tensor tokens;  // [kBeam, kMaxLen] on the host
  torch::Tensor scores;  // [kBeam]
};

DecodeResult beam_search(CaptionNet &net, const torch::Tensor &image) {
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): the engine's model is back in training
  // mode after fit(); the encoder's BatchNorm sees one image.
  auto [h0, c0] = net->init_state(image);
  auto h = h0.expand({kBeam, -1}).contiguous(), c = c0.expand({kBeam, -1}).contiguous();
  auto tok = torch::full({kBeam}, kBos, torch::TensorOptions().dtype(torch::kLong).device(image.device()));
  auto score = torch::zeros({kBeam}, image.options());
  score.slice(0, 1).fill_(-1e9);
  std::vector<torch::Tensor> history;
  for (int64_t t = 0; t < kMaxLen; ++t) {
    // BUG(torch-eval-mode-missing): every decoding step runs with dropout on.
    auto [logits, h2, c2] = net->decode_step(tok, h, c);
    auto top = (score.unsqueeze(1) + logits.log_softmax(1)).flatten().topk(kBeam);
    score = std::get<0>(top);
    auto beam = std::get<1>(top).div(kVocab, "floor");
    tok = std::get<1>(top).remainder(kVocab);
    h = h2.index_select(0, beam);
    c = c2.index_select(0, beam);
    for (auto &past : history) past = past.index_select(0, beam);
    // OK(torch-loss-accumulation-graph): token ids under a NoGradGuard.
    history.push_back(tok);
  }
  return {to_host_async(torch::stack(history, 1)), to_host_async(score)};
}

void profile_encoder(CaptionNet &net, int iters) {
  torch::NoGradGuard no_grad;
  const bool was_training = net->is_training();
  net->eval();
  // BUG(torch-cuda-unguarded): --profile assumes a GPU; main() may have
  // fallen back to the CPU.
  auto images = torch::randn({32, 3, 128, 128}, torch::TensorOptions().device(torch::kCUDA));
  for (int i = 0; i < iters; ++i)
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval()
    // and a NoGradGuard, restored below.
    net->init_state(images);
  torch::cuda::synchronize();
  net->train(was_training);
}

int main(int argc, char **argv) {
  torch::manual_seed(259);
  const Config cfg = parse_args(argc, argv);
  // OK(torch-cuda-unguarded): the ternary checks for a GPU.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Engine engine(cfg, device);
  if (cfg.profile) profile_encoder(engine.model(), 20);
  engine.fit();

  CaptionNet net = engine.model();
  auto res = beam_search(net, torch::rand({1, 3, 128, 128}).to(device));
  // BUG(torch-non-blocking-d2h-race): beam_search() only started the copy of
  // the tokens; nothing waited for it.
  auto best = res.tokens.accessor<int64_t, 2>();
  std::cout << "best caption ids:";
  for (int64_t t = 0; t < kMaxLen; ++t) std::cout << ' ' << best[0][t];
  wait_for_device();
  // OK(torch-non-blocking-d2h-race): synchronised before the score is read.
  std::cout << "\nscore " << res.scores[0].item<float>() << "\n";
  return 0;
}
