// Document OCR for scanned invoices: text lines (32 px high, up to 256 px
// wide) are read by a CRNN-style recogniser (conv + batch norm, dropout, a
// per-column classifier) trained with CTC on synthetic lines with micro-batch
// accumulation, then fine-tuned on a customer's handwritten forms. Pages are
// transcribed under bfloat16 autocast; line confidences feed a review queue.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#define OCR_AMP(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define OCR_AMP_DTYPE(t) at::autocast::set_autocast_dtype(at::kCUDA, (t))
#else
#define OCR_AMP(on) at::autocast::set_enabled(on)
#define OCR_AMP_DTYPE(t) at::autocast::set_autocast_gpu_dtype(t)
#endif

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace ocr {

constexpr int64_t kHeight = 32, kMaxWidth = 256, kClasses = 64;  // CTC blank + 63 glyphs
const std::string kAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ";

struct LineBatch {
  torch::Tensor images;          // [B, 1, 32, W]
  torch::Tensor targets;         // [B, S] glyph ids 1..63
  torch::Tensor target_lengths;  // [B]
};

LineBatch synth_lines(int64_t n, int64_t width, int64_t max_len) {
  auto targets = torch::randint(1, kClasses, {n, max_len}, torch::kLong);
  auto lengths = torch::randint(max_len / 2, max_len + 1, {n}, torch::kLong);
  return {torch::rand({n, 1, kHeight, width}), targets, lengths};
}

struct RecognizerImpl : nn::Module {
  RecognizerImpl()
      : backbone(register_module(
            "backbone", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::BatchNorm2d(32),
                                       nn::ReLU(), nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)),
                                       nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2)))),
        drop(register_module("drop", nn::Dropout(0.25))),
        classifier(register_module("classifier", nn::Linear(64 * (kHeight / 4), kClasses))) {}
  // [B, 1, 32, W] -> log-probabilities [W/4, B, classes], CTC's layout.
  torch::Tensor forward(const torch::Tensor &images) {
    auto f = backbone->forward(images).permute({3, 0, 1, 2}).flatten(2);
    return classifier(drop(f)).log_softmax(2);
  }
  nn::Sequential backbone;
  nn::Dropout drop;
  nn::Linear classifier;
};
TORCH_MODULE(Recognizer);

// CTC over a batch; the lengths stay on the host, where LibTorch reads them.
torch::Tensor ctc(const torch::Tensor &log_probs, const LineBatch &b, const torch::Device &device) {
  auto input_lengths = torch::full({log_probs.size(1)}, log_probs.size(0), torch::kLong);
  // OK(torch-device-mismatch): CTC's lengths are read on the host, not operands.
  return F::ctc_loss(log_probs, b.targets.to(device), input_lengths, b.target_lengths);
}

// The CTC loss of one micro-batch, divided by the micro-batches per update.
torch::Tensor micro_batch_loss(Recognizer &net, const LineBatch &b, const torch::Device &device, int64_t accum) {
  // OK(torch-non-blocking-pageable): main() pins the training lines when the device is CUDA.
  auto images = b.images.to(device, /*non_blocking=*/true);
  return ctc(net->forward(images), b, device) / static_cast<double>(accum);
}

double validate(Recognizer &net, const std::vector<LineBatch> &val, const torch::Device &device) {
  net->eval();
  torch::NoGradGuard no_grad;
  double total = 0.0;
  for (const auto &b : val) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval() and the guard above.
    auto log_probs = net->forward(b.images.to(device));
    // OK(torch-loss-accumulation-graph): .item() of a loss computed without autograd.
    total += ctc(log_probs, b, device).item<double>();
  }
  net->train();
  return total / static_cast<double>(val.size());
}

void pretrain(Recognizer &net, const std::vector<LineBatch> &train, const std::vector<LineBatch> &val,
              const torch::Device &device, int epochs) {
  constexpr int64_t kAccum = 4;
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));
  int64_t micro = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    auto epoch_loss = torch::zeros({}, device);
    for (const auto &b : train) {
      // OK(torch-eval-mode-missing): validate() put the net back in train().
      auto loss = micro_batch_loss(net, b, device, kAccum);
      // OK(torch-grad-accumulation-unscaled): micro_batch_loss() already divided by kAccum.
      loss.backward();
      // OK(torch-loss-accumulation-graph): detached.
      epoch_loss += loss.detach();
      if (++micro % kAccum == 0) {
        // OK(torch-missing-zero-grad): zero_grad() under the same condition as step().
        opt.step();
        opt.zero_grad();
      }
      if (micro % 50 == 0)
        // OK(torch-host-sync-in-loop): every 50 micro-batches only.
        std::cout << "  micro " << micro << " ctc " << loss.item<float>() * kAccum << '\n';
    }
    // OK(torch-host-sync-in-loop): once per epoch.
    std::cout << "epoch " << epoch << " train " << epoch_loss.item<double>() * kAccum / train.size()
              << " val " << validate(net, val, device) << '\n';
  }
}

}  // namespace ocr

using ocr::LineBatch;
using ocr::Recognizer;

torch::Tensor form_loss(Recognizer &net, const LineBatch &b, const torch::Device &device) {
  // OK(torch-eval-mode-missing): pretrain() left the net in train(); this forward is trained.
  return ocr::ctc(net->forward(b.images.to(device)), b, device);
}

// Fine-tunes on a customer's forms, one form per call; the optimizer
// updates once every `accum` forms.
class FormFineTuner {
 public:
  FormFineTuner(Recognizer net, torch::Device device, int64_t accum)
      : net_(std::move(net)), device_(device), accum_(accum),
        opt_(net_->parameters(), torch::optim::SGDOptions(3e-4).momentum(0.9)) {}
  void step_on(const LineBatch &form) {
    auto loss = form_loss(net_, form, device_);
    // BUG(torch-grad-accumulation-unscaled): accum_ forms add their mean
    // losses' gradients before each step: accum_ times the learning rate.
    loss.backward();
    if (++seen_ == accum_) {
      // OK(torch-missing-zero-grad): reset together with the step.
      opt_.step();
      opt_.zero_grad();
      seen_ = 0;
    }
  }

 private:
  Recognizer net_;
  torch::Device device_;
  int64_t accum_, seen_ = 0;
  torch::optim::SGD opt_;
};

struct ScannedPage {
  std::vector<float> gray;  // the scanner's buffer, lines stacked
  int64_t lines = 0, width = 0;
  // A view of the buffer, [lines, 1, 32, width].
  torch::Tensor pixels() { return torch::from_blob(gray.data(), {lines, 1, ocr::kHeight, width}); }
};

ScannedPage scan_page(int64_t lines, int64_t width) {
  ScannedPage p{std::vector<float>(static_cast<size_t>(lines * ocr::kHeight * width)), lines, width};
  std::mt19937 rng(297);
  std::uniform_real_distribution<float> ink(0.f, 1.f);
  for (auto &v : p.gray) v = ink(rng);
  return p;
}

// Lets cuDNN pick its convolution algorithms for the widest line once.
void warm_up(Recognizer &net) {
  torch::NoGradGuard no_grad;
  // OK(torch-cuda-unguarded): main() calls warm_up() only when is_available().
  auto dummy = torch::zeros({8, 1, ocr::kHeight, ocr::kMaxWidth}, torch::kCUDA);
  // OK(torch-device-mismatch, torch-eval-mode-missing): the net is on CUDA on that path, and in eval().
  net->forward(dummy);
}

std::vector<std::string> transcribe_page(Recognizer &net, const torch::Tensor &lines) {
  torch::NoGradGuard no_grad;
  OCR_AMP_DTYPE(at::kBFloat16);
  // BUG(torch-autocast-region): a blank page returns below with autocast
  // still on; everything after it on this thread runs in bfloat16.
  OCR_AMP(true);
  std::vector<std::string> out;
  if (lines.size(0) == 0)
    return out;
  // OK(torch-host-sync-in-loop): inference, no training loop.
  auto best = net->forward(lines).argmax(2).transpose(0, 1).contiguous().cpu();
  OCR_AMP(false);
  auto path = best.accessor<int64_t, 2>();
  for (int64_t i = 0; i < path.size(0); ++i) {
    std::string text;
    for (int64_t t = 0, prev = 0; t < path.size(1); prev = path[i][t], ++t)
      if (path[i][t] != 0 && path[i][t] != prev)
        text.push_back(ocr::kAlphabet[static_cast<size_t>(path[i][t] - 1)]);
    out.push_back(text);
  }
  return out;
}

// Mean best-class probability per line, for the human review queue.
torch::Tensor line_confidence(Recognizer &net, const torch::Tensor &lines) {
  torch::NoGradGuard no_grad;
  // OK(torch-autocast-region): the catch block switches autocast off before it rethrows.
  OCR_AMP(true);
  try {
    if (lines.size(3) > ocr::kMaxWidth)
      throw std::invalid_argument("line wider than " + std::to_string(ocr::kMaxWidth) + " px");
    auto conf = std::get<0>(net->forward(lines).exp().max(2)).mean(0);
    OCR_AMP(false);
    return conf;
  } catch (...) {
    OCR_AMP(false);
    throw;
  }
}

int main() {
  torch::manual_seed(297);
  // OK(torch-cuda-unguarded): guarded selection.
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  std::vector<LineBatch> train, val, forms;
  for (int i = 0; i < 80; ++i)
    train.push_back(ocr::synth_lines(16, ocr::kMaxWidth, 20));
  for (int i = 0; i < 6; ++i)
    val.push_back(ocr::synth_lines(32, ocr::kMaxWidth, 20));
  for (int i = 0; i < 24; ++i)
    forms.push_back(ocr::synth_lines(4, 192, 14));
  if (device.is_cuda())
    for (auto &b : train)
      b.images = b.images.pin_memory();

  Recognizer net;
  net->to(device);
  ocr::pretrain(net, train, val, device, 4);
  FormFineTuner tuner(net, device, 4);
  for (const auto &form : forms)
    tuner.step_on(form);

  net->eval();
  if (torch::cuda::is_available())
    warm_up(net);
  ScannedPage page = scan_page(12, ocr::kMaxWidth);
  // BUG(torch-non-blocking-pageable): pixels() is a from_blob view of the
  // scanner's std::vector: pageable, so the copy is synchronous anyway.
  auto lines = page.pixels().to(device, /*non_blocking=*/true);
  for (const auto &text : transcribe_page(net, lines))
    std::cout << '"' << text << "\"\n";
  try {
    auto conf = line_confidence(net, lines);
    std::cout << "lines for review: " << (conf < 0.6).sum().item<int64_t>() << '\n';
  } catch (const std::invalid_argument &e) {
    std::cerr << "page rejected: " << e.what() << '\n';
  }
}
