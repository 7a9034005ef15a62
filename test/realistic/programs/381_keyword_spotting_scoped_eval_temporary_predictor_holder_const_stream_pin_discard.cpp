// Keyword spotting on one-second clips (40 log-mel bands x 101 frames): ten
// command words plus "silence" and "unknown". A small conv net with BatchNorm
// and dropout is trained with SpecAugment-style masking; evaluation switches
// the net with a hand-written ScopedEval guard that restores the previous
// mode. The trained net then scans a long recording with a sliding window,
// prints a confusion matrix, and is wrapped in the Predictor the voice
// assistant links against.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace kws {

constexpr int64_t kMels = 40, kFrames = 101, kHop = 20;
constexpr int64_t kKeywords = 10, kClasses = 12;

torch::Device pick_device() {
  // OK(torch-cuda-unguarded): CUDA only when the runtime has it.
  if (torch::cuda::is_available()) return torch::Device(torch::kCUDA, 0);
  return torch::Device(torch::kCPU);
}

struct KwsNetImpl : nn::Module {
  KwsNetImpl()
      : conv1(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)))),
        bn1(register_module("bn1", nn::BatchNorm2d(32))),
        conv2(register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)))),
        bn2(register_module("bn2", nn::BatchNorm2d(64))),
        drop(register_module("drop", nn::Dropout(0.25))),
        fc(register_module("fc", nn::Linear(64, kClasses))) {}
  torch::Tensor forward(const torch::Tensor &mel) {  // B x 1 x 40 x 101
    auto h = torch::relu(bn1->forward(conv1->forward(mel)));
    h = torch::relu(bn2->forward(conv2->forward(F::max_pool2d(h, F::MaxPool2dFuncOptions(2)))));
    return fc->forward(drop->forward(h.mean({2, 3})));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::BatchNorm2d bn2;
  nn::Dropout drop;
  nn::Linear fc;
};
TORCH_MODULE(KwsNet);

// eval() for the lifetime of the object; the previous mode comes back after.
class ScopedEval {
 public:
  explicit ScopedEval(nn::Module &m) : module_(m), was_training_(m.is_training()) { module_.eval(); }
  ~ScopedEval() { module_.train(was_training_); }
  ScopedEval(const ScopedEval &) = delete;
  ScopedEval &operator=(const ScopedEval &) = delete;

 private:
  nn::Module &module_;
  bool was_training_;
};

struct Batch {
  torch::Tensor mel, label;
};

class ClipBank {
 public:
  explicit ClipBank(int64_t n)
      : mel_(torch::randn({n, 1, kMels, kFrames})), label_(torch::randint(0, kClasses, {n}, torch::kLong)) {}
  Batch batch(int64_t i, int64_t bs) const { return {mel_.narrow(0, i, bs), label_.narrow(0, i, bs)}; }
  int64_t size() const { return mel_.size(0); }

 private:
  torch::Tensor mel_, label_;
};

torch::Tensor spec_augment(const torch::Tensor &mel) {
  auto keep_t = torch::rand({mel.size(0), 1, 1, kFrames}, mel.options()) > 0.1;
  auto keep_f = torch::rand({mel.size(0), 1, kMels, 1}, mel.options()) > 0.1;
  return mel * keep_t * keep_f;
}

double train_epoch(KwsNet &net, torch::optim::Optimizer &opt, const ClipBank &bank, torch::Device device, int64_t bs) {
  auto running = torch::zeros({}, device);
  int64_t steps = 0;
  for (int64_t i = 0; i + bs <= bank.size(); i += bs) {
    Batch b = bank.batch(i, bs);
    if (device.is_cuda()) {
      // BUG(torch-tensor-to-discarded): pin_memory() returns a pinned copy; b.mel itself stays pageable.
      b.mel.pin_memory();
    }
    // BUG(torch-non-blocking-pageable): b.mel is still the bank's pageable slice.
    auto x = spec_augment(b.mel.to(device, /*non_blocking=*/true));
    // OK(torch-eval-mode-missing): the net is in training mode here; evaluate()'s ScopedEval restored it.
    auto loss = F::cross_entropy(net->forward(x), b.label.to(device));
    opt.zero_grad();
    loss.backward();
    opt.step();
    // OK(torch-loss-accumulation-graph): detached before it is summed.
    running = running + loss.detach();
    ++steps;
  }
  return steps ? (running / steps).item<double>() : 0.0;
}

double evaluate(KwsNet &net, const ClipBank &bank, torch::Device device) {
  ScopedEval scope(*net);
  torch::NoGradGuard no_grad;
  int64_t correct = 0;
  for (int64_t i = 0; i + 128 <= bank.size(); i += 128) {
    Batch b = bank.batch(i, 128);
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): ScopedEval lives to the end of the function; guard above.
    auto pred = net->forward(b.mel.to(device)).argmax(1);
    correct += pred.eq(b.label.to(device)).sum().item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(bank.size() / 128 * 128);
}

torch::Tensor confusion(KwsNet &net, const ClipBank &bank, torch::Device device) {
  ScopedEval{*net};
  torch::NoGradGuard no_grad;
  auto cm = torch::zeros({kClasses, kClasses}, torch::kLong);
  for (int64_t i = 0; i + 64 <= bank.size(); i += 64) {
    Batch b = bank.batch(i, 64);
    // BUG(torch-eval-mode-missing): the ScopedEval temporary died at the end of its own statement and restored training mode.
    auto pred = net->forward(b.mel.to(device)).argmax(1).cpu();
    cm.index_put_({b.label, pred}, torch::ones({64}, torch::kLong), /*accumulate=*/true);
  }
  return cm;
}

struct Detection {
  int64_t frame;
  int64_t keyword;
};

std::vector<Detection> scan_recording(KwsNet &net, const torch::Tensor &recording, torch::Device device, double thresh) {
  ScopedEval scope(*net);
  std::vector<Detection> hits;
  auto frames = recording.to(device);  // 40 x T
  for (int64_t start = 0; start + kFrames <= frames.size(1); start += kHop) {
    auto window = frames.narrow(1, start, kFrames).unsqueeze(0).unsqueeze(0);
    // BUG(torch-inference-without-no-grad): ScopedEval is not a grad guard; every window's graph is recorded.
    auto probs = torch::softmax(net->forward(window), 1).squeeze(0);
    const auto best = probs.argmax().item<int64_t>();
    if (best < kKeywords && probs[best].item<double>() > thresh) hits.push_back({start, best});
  }
  return hits;
}

// Per-user adaptation: only the classifier moves, on the user's enrolment clips.
void enrol_user(KwsNet &net, const std::vector<torch::Tensor> &clips, int64_t keyword, torch::Device device) {
  torch::optim::Adam head_opt(net->fc->parameters(), torch::optim::AdamOptions(1e-3));
  auto target = torch::full({1}, keyword, torch::TensorOptions().dtype(torch::kLong).device(device));
  head_opt.zero_grad();
  for (int round = 0; round < 3; ++round) {
    for (const auto &clip : clips) {
      auto loss = F::cross_entropy(net->forward(clip.to(device).view({1, 1, kMels, kFrames})), target);
      loss.backward();
      // BUG(torch-missing-zero-grad): reset once before the rounds; every clip's gradient is added to all earlier ones.
      head_opt.step();
    }
  }
}

// What the assistant links against: one clip in, one label out.
class Predictor {
 public:
  Predictor(KwsNet net, std::vector<std::string> labels, torch::Device device)
      : net_(std::move(net)), labels_(std::move(labels)), device_(device) {}
  const std::string &predict(const torch::Tensor &mel) const {
    torch::NoGradGuard no_grad;
    // BUG(torch-eval-mode-missing): the holder shares main's net, which is in training mode when the Predictor is built.
    auto logits = net_->forward(mel.to(device_).view({1, 1, kMels, kFrames}));
    return labels_.at(static_cast<size_t>(logits.argmax(1).item<int64_t>()));
  }

 private:
  mutable KwsNet net_;  // forward() is not const
  std::vector<std::string> labels_;
  torch::Device device_;
};

}  // namespace kws

int main() {
  using namespace kws;
  torch::manual_seed(381);
  const torch::Device device = pick_device();
  ClipBank train_bank(4096), test_bank(1024);

  KwsNet net;
  net->to(device);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(5e-4));
  for (int epoch = 0; epoch < 12; ++epoch) {
    const double loss = train_epoch(net, opt, train_bank, device, 64);
    std::cout << "epoch " << epoch << " loss " << loss << " acc " << evaluate(net, test_bank, device) << '\n';
  }
  std::cout << confusion(net, test_bank, device) << '\n';

  auto recording = torch::randn({kMels, 3000});
  for (const auto &d : scan_recording(net, recording, device, 0.8))
    std::cout << "keyword " << d.keyword << " at frame " << d.frame << '\n';

  const std::vector<std::string> labels = {"yes", "no",  "up",   "down", "left",    "right",
                                           "on",  "off", "stop", "go",   "silence", "unknown"};
  std::vector<torch::Tensor> enrolment;
  for (int i = 0; i < 8; ++i) enrolment.push_back(torch::randn({kMels, kFrames}));
  enrol_user(net, enrolment, /*keyword=*/9, device);
  Predictor assistant(net, labels, device);
  for (int i = 0; i < 5; ++i) std::cout << "clip " << i << ": " << assistant.predict(torch::randn({kMels, kFrames})) << '\n';
  return 0;
}
