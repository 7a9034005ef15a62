// Handwritten line recognition for scanned archive forms: one CTC line
// recogniser per script, kept in a std::map keyed by script ("latin" for the
// free-text fields, "digits" for dates and amounts). Training runs CUDA
// autocast around the forward and the CTC loss with a static loss scale; a
// line narrower than its transcription has no CTC alignment and is skipped,
// or stops the run in strict mode. Reporting goes through a table of named
// metric callables, and mode switches are undone by a lambda scope guard.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define HTR_AMP_ENABLE(on) at::autocast::set_autocast_enabled(at::kCUDA, on)
#else
#define HTR_AMP_ENABLE(on) at::autocast::set_enabled(on)
#endif

constexpr int64_t kHeight = 32, kLabelLen = 12;
constexpr double kLossScale = 1024.0;
const std::map<std::string, std::string> kAlphabets = {{"latin", " abcdefghijklmnopqrstuvwxyz.,'-"},
                                                       {"digits", "0123456789./-"}};

// Runs a callable when the scope ends.
class ScopeExit {
 public:
  explicit ScopeExit(std::function<void()> fn) : fn_(std::move(fn)) {}
  ~ScopeExit() { fn_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  std::function<void()> fn_;
};

struct LineRecognizerImpl : nn::Module {
  explicit LineRecognizerImpl(int64_t alphabet)
      : conv(register_module(
            "conv", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)), nn::BatchNorm2d(32),
                                   nn::ReLU(), nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)),
                                   nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2)))),
        drop(register_module("drop", nn::Dropout(0.25))),
        proj(register_module("proj", nn::Linear(64 * (kHeight / 4), alphabet + 1))) {}
  // images [B, 1, 32, W] -> log-probs [W/4, B, alphabet + 1], blank = 0
  torch::Tensor forward(const torch::Tensor& images) {
    auto columns = conv->forward(images).permute({3, 0, 1, 2}).flatten(2);
    return torch::log_softmax(proj(drop(columns)), 2);
  }
  nn::Sequential conv;
  nn::Dropout drop;
  nn::Linear proj;
};
TORCH_MODULE(LineRecognizer);

struct LineBatch {
  torch::Tensor images, targets, target_lengths;  // targets [B, kLabelLen], lengths on the host
  int64_t max_label_len = kLabelLen;
};

struct EpochStats {
  torch::Tensor ctc;
  int64_t batches = 0;
};

std::vector<LineBatch> scanned_lines(int64_t batches, int64_t n, int64_t width, int64_t alphabet,
                                     torch::Device device) {
  std::vector<LineBatch> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto targets = torch::randint(1, alphabet + 1, {n, kLabelLen}, torch::TensorOptions().dtype(torch::kLong));
    auto images = torch::rand({n, 1, kHeight, width}) * 0.2 + 0.01 * targets.sum(1).to(torch::kFloat).view({n, 1, 1, 1});
    out.push_back({images.to(device), targets.to(device), torch::full({n}, kLabelLen, torch::kLong), kLabelLen});
  }
  return out;
}

// One epoch; false when strict mode meets a line that CTC cannot align.
bool train_script(LineRecognizer& net, torch::optim::Optimizer& opt, const std::vector<LineBatch>& batches,
                  EpochStats& stats, bool strict) {
  net->train();
  for (const auto& b : batches) {
    opt.zero_grad();
    // BUG(torch-autocast-region): the strict-mode return below leaves the
    // thread in autocast; only the skip path switches it off.
    HTR_AMP_ENABLE(true);
    auto log_probs = net->forward(b.images);
    if (log_probs.size(0) < b.max_label_len) {
      if (strict) {
        std::cerr << "line image too narrow for its transcription\n";
        return false;
      }
      HTR_AMP_ENABLE(false);
      continue;
    }
    auto input_lengths = torch::full({b.images.size(0)}, log_probs.size(0), torch::kLong);
    // OK(torch-device-mismatch): ctc_loss takes its length tensors on the host.
    auto loss = F::ctc_loss(log_probs, b.targets, input_lengths, b.target_lengths,
                            F::CTCLossFuncOptions().zero_infinity(true));
    HTR_AMP_ENABLE(false);
    // OK(torch-autocast-region): closed before backward(), and the float16
    // loss carries the static loss scale.
    (loss * kLossScale).backward();
    for (auto& p : net->parameters())
      if (p.grad().defined())
        p.grad().div_(kLossScale);
    opt.step();
    // BUG(torch-loss-accumulation-graph): the caller's stats outlive the
    // batch, and each += keeps its graph.
    stats.ctc += loss;
    ++stats.batches;
  }
  return true;
}

// Mean validation CTC loss; the scope guard puts the net back in train().
double validation_ctc(LineRecognizer& net, const std::vector<LineBatch>& val) {
  net->eval();
  ScopeExit back_to_train([&] { net->train(); });
  torch::NoGradGuard no_grad;
  double total = 0.0;
  for (const auto& b : val) {
    // OK(torch-eval-mode-missing): eval() above; train() only when the scope ends.
    auto log_probs = net->forward(b.images);
    auto input_lengths = torch::full({b.images.size(0)}, log_probs.size(0), torch::kLong);
    total += F::ctc_loss(log_probs, b.targets, input_lengths, b.target_lengths).item<double>();
  }
  return total / static_cast<double>(val.size());
}

// Greedy CTC decoding of the first line of a page crop.
std::string transcribe(LineRecognizer& net, const torch::Tensor& lines, const std::string& alphabet) {
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): main() calls this right after
  // validation_ctc(), whose scope guard left the net in train().
  auto best = net->forward(lines).argmax(2).select(1, 0).cpu();
  std::string text;
  int64_t prev = 0;
  for (int64_t t = 0; t < best.size(0); ++t) {
    const int64_t k = best[t].item<int64_t>();
    if (k != 0 && k != prev)
      text += alphabet[static_cast<size_t>(k - 1)];
    prev = k;
  }
  return text;
}

int main(int argc, char** argv) {
  torch::manual_seed(273);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  const bool strict = argc > 1 && std::string(argv[1]) == "--strict";

  std::map<std::string, LineRecognizer> recognizers;
  std::map<std::string, std::vector<LineBatch>> val_sets;
  for (const auto& [script, alphabet] : kAlphabets) {
    const auto size = static_cast<int64_t>(alphabet.size());
    auto& net = recognizers.emplace(script, LineRecognizer(size)).first->second;
    net->to(device);
    val_sets.emplace(script, scanned_lines(4, 32, 256, size, device));
    torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(3e-4));
    const auto train = scanned_lines(80, 32, 256, size, device);
    EpochStats stats{torch::zeros({}, device)};
    for (int epoch = 0; epoch < 5; ++epoch)
      if (!train_script(net, opt, train, stats, strict))
        break;
    std::cout << script << " train CTC " << (stats.ctc / std::max<int64_t>(stats.batches, 1)).item<double>()
              << " val CTC " << validation_ctc(net, val_sets.at(script)) << '\n';
  }

  std::map<std::string, std::function<double()>> metrics;
  metrics["blank_rate/latin"] = [&net = recognizers.at("latin"), &val = val_sets.at("latin")] {
    torch::NoGradGuard no_grad;
    double blanks = 0.0;
    for (const auto& b : val)
      // BUG(torch-eval-mode-missing): no eval() in the metric, and every
      // recogniser leaves the training block in train().
      blanks += (net->forward(b.images).argmax(2) == 0).to(torch::kFloat).mean().item<double>();
    return blanks / static_cast<double>(val.size());
  };
  const auto synthetic_dates = scanned_lines(2, 16, 128, 13, torch::kCPU);
  metrics["exact_len/digits_synthetic"] = [&net = recognizers.at("digits"), synthetic_dates] {
    net->eval();
    ScopeExit restore([&] { net->train(); });
    torch::NoGradGuard no_grad;
    double hits = 0.0;
    for (const auto& b : synthetic_dates) {
      // BUG(torch-device-mismatch): the rendered dates stay on the CPU while
      // the recogniser was moved to `device`.
      // OK(torch-eval-mode-missing): eval() at the top of this metric.
      auto best = net->forward(b.images).argmax(2);
      hits += ((best != 0).sum(0) >= b.max_label_len / 2).to(torch::kFloat).mean().item<double>();
    }
    return hits / static_cast<double>(synthetic_dates.size());
  };
  for (const auto& [name, fn] : metrics)
    std::cout << name << " = " << fn() << '\n';

  const auto page = torch::rand({1, 1, kHeight, 384}).to(device);
  std::cout << "page line 1: \"" << transcribe(recognizers.at("latin"), page, kAlphabets.at("latin")) << "\"\n";
}
