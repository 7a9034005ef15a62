// Gesture recognition on a smartwatch from 50 Hz IMU windows (3-axis
// accelerometer + 3-axis gyroscope). Two model families, a GRU encoder and a
// dilated temporal conv net, share one class template Trainer<Model> with
// learning-rate warm-up, an optional bfloat16 autocast scope held in a
// std::optional, and std::function logging hooks. The GRU then teaches a
// small TCN for the watch firmware by hard-label distillation with gradient
// accumulation. Works with LibTorch 1.13 and 2.x.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kFeatures = 6, kGestures = 20, kFrames = 128;

// CUDA autocast in bfloat16 for its scope; restores the dtype and the state.
class Bf16Autocast {
 public:
  Bf16Autocast() {
#if TORCH_VERSION_MAJOR >= 2
    was_on_ = at::autocast::is_autocast_enabled(at::kCUDA);
    old_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    was_on_ = at::autocast::is_enabled();
    old_dtype_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(true);
#endif
  }
  ~Bf16Autocast() {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(at::kCUDA, was_on_);
    at::autocast::set_autocast_dtype(at::kCUDA, old_dtype_);
#else
    at::autocast::set_enabled(was_on_);
    at::autocast::set_autocast_gpu_dtype(old_dtype_);
#endif
  }

 private:
  bool was_on_ = false;
  at::ScalarType old_dtype_ = at::kHalf;
};

struct Clip {
  torch::Tensor frames, lengths, label;  // [B, T, kFeatures], [B], [B]
};

struct GruClassifierImpl : nn::Module {
  GruClassifierImpl(int64_t in, int64_t hidden, int64_t classes)
      : gru(register_module("gru", nn::GRU(nn::GRUOptions(in, hidden).num_layers(2).batch_first(true)))),
        drop(register_module("drop", nn::Dropout(0.3))),
        fc(register_module("fc", nn::Linear(hidden, classes))) {}
  torch::Tensor forward(const torch::Tensor& frames, const torch::Tensor& lengths) {
    auto out = std::get<0>(gru->forward(frames));  // [B, T, H]
    auto last = (lengths - 1).view({-1, 1, 1}).expand({-1, 1, out.size(2)});
    return fc(drop(out.gather(1, last).squeeze(1)));
  }
  nn::GRU gru;
  nn::Dropout drop;
  nn::Linear fc;
};
TORCH_MODULE(GruClassifier);

struct TcnClassifierImpl : nn::Module {
  TcnClassifierImpl(int64_t in, int64_t ch, int64_t classes) {
    body = register_module(
        "body", nn::Sequential(nn::Conv1d(nn::Conv1dOptions(in, ch, 5).padding(2)), nn::BatchNorm1d(ch), nn::ReLU(),
                               nn::Conv1d(nn::Conv1dOptions(ch, ch, 5).padding(4).dilation(2)), nn::BatchNorm1d(ch),
                               nn::ReLU(), nn::Dropout(0.2)));
    fc = register_module("fc", nn::Linear(ch, classes));
  }
  torch::Tensor forward(const torch::Tensor& frames, const torch::Tensor& lengths) {
    auto h = body->forward(frames.transpose(1, 2));  // [B, C, T]
    auto valid = torch::arange(frames.size(1), lengths.options()).unsqueeze(0) < lengths.unsqueeze(1);
    auto pooled = (h * valid.unsqueeze(1)).sum(2) / lengths.unsqueeze(1).to(h.dtype());
    return fc(pooled);
  }
  nn::Sequential body{nullptr};
  nn::Linear fc{nullptr};
};
TORCH_MODULE(TcnClassifier);

struct TrainerOptions {
  int64_t epochs = 8;
  double lr = 1e-3;
  int64_t warmup_steps = 200;
  int64_t log_every = 50;
  bool bf16 = false;
};

template <typename Model>
class Trainer {
 public:
  using Hook = std::function<void(int64_t, double)>;

  Trainer(Model model, TrainerOptions opts)
      : model_(std::move(model)), opts_(opts), opt_(model_->parameters(), torch::optim::AdamOptions(opts.lr)) {}

  void add_hook(Hook hook) { hooks_.push_back(std::move(hook)); }
  Model& model() { return model_; }

  void fit(const std::vector<Clip>& clips) {
    for (int64_t epoch = 0; epoch < opts_.epochs; ++epoch) {
      on_epoch_begin();
      for (const auto& clip : clips) {
        set_lr(opts_.lr * std::min(1.0, static_cast<double>(step_ + 1) / static_cast<double>(opts_.warmup_steps)));
        torch::Tensor loss;
        {
          std::optional<Bf16Autocast> amp;
          if (opts_.bf16)
            amp.emplace();
          loss = F::cross_entropy(model_->forward(clip.frames, clip.lengths), clip.label);
        }
        // OK(torch-autocast-region): a bfloat16 scope, closed before backward().
        loss.backward();
        // BUG(torch-missing-zero-grad): the only reset is on_epoch_begin()'s,
        // once per epoch; every later step re-applies the epoch's gradients.
        opt_.step();
        if (++step_ % opts_.log_every == 0) {
          // OK(torch-host-sync-in-loop): every log_every steps.
          const double value = loss.item<double>();
          for (auto& hook : hooks_)
            hook(step_, value);
        }
      }
    }
  }

 private:
  void on_epoch_begin() {
    model_->train();
    opt_.zero_grad();
  }
  void set_lr(double lr) {
    for (auto& group : opt_.param_groups())
      static_cast<torch::optim::AdamOptions&>(group.options()).lr(lr);
  }

  Model model_;
  TrainerOptions opts_;
  torch::optim::Adam opt_;
  std::vector<Hook> hooks_;
  int64_t step_ = 0;
};

template <typename Model>
double top1(Model& model, const std::vector<Clip>& clips) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (const auto& c : clips) {
    // BUG(torch-eval-mode-missing): main() scores the TCN straight after
    // fit() left it in training mode (the GRU gets its eval() first).
    auto logits = model->forward(c.frames, c.lengths);
    correct += logits.argmax(1).eq(c.label).sum().template item<int64_t>();
    total += c.label.size(0);
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

// Hard-label distillation of `teacher` into `student`, one step every `accum` clips.
template <typename Teacher, typename Student>
void distill(Teacher& teacher, Student& student, const std::vector<Clip>& clips, int64_t accum) {
  student->train();
  torch::optim::Adam opt(student->parameters(), torch::optim::AdamOptions(5e-4));
  int64_t micro = 0;
  for (const auto& c : clips) {
    torch::Tensor pseudo;
    {
      torch::NoGradGuard no_grad;
      // OK(torch-eval-mode-missing): main() put the teacher in eval mode.
      pseudo = teacher->forward(c.frames, c.lengths).argmax(1);
    }
    auto loss = F::cross_entropy(student->forward(c.frames, c.lengths), pseudo);
    // BUG(torch-grad-accumulation-unscaled): `accum` clip means add up in
    // the student's gradients before each step, never divided.
    loss.backward();
    if (++micro % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

std::vector<Clip> synth_clips(int64_t batches, int64_t n, torch::Device device) {
  std::vector<Clip> out;
  auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  for (int64_t b = 0; b < batches; ++b) {
    auto label = torch::randint(kGestures, {n}, long_opts);
    auto lengths = torch::randint(kFrames / 2, kFrames + 1, {n}, long_opts);
    auto t = torch::linspace(0, 1, kFrames, device).view({1, kFrames, 1});
    auto motion = torch::sin(t * 6.28 * (label.view({n, 1, 1}).to(torch::kFloat) + 1.0));
    out.push_back({motion + 0.1 * torch::randn({n, kFrames, kFeatures}, device), lengths, label});
  }
  return out;
}

int main() {
  torch::manual_seed(166);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto train = synth_clips(120, 32, device), val = synth_clips(12, 64, device);

  std::vector<std::pair<int64_t, double>> history;
  TrainerOptions opts;
  opts.bf16 = device.is_cuda();

  GruClassifier gru(kFeatures, 256, kGestures);
  gru->to(device);
  Trainer<GruClassifier> gru_trainer(gru, opts);
  gru_trainer.add_hook([&history](int64_t step, double loss) { history.emplace_back(step, loss); });
  gru_trainer.fit(train);
  gru_trainer.model()->eval();
  std::cout << "GRU top-1 " << top1(gru_trainer.model(), val) << '\n';

  TcnClassifier tcn(kFeatures, 128, kGestures);
  tcn->to(device);
  Trainer<TcnClassifier> tcn_trainer(tcn, opts);
  tcn_trainer.fit(train);
  std::cout << "TCN top-1 " << top1(tcn_trainer.model(), val) << '\n';

  TcnClassifier watch(kFeatures, 32, kGestures);
  watch->to(device);
  distill(gru_trainer.model(), watch, train, /*accum=*/4);
  watch->eval();
  std::cout << "watch top-1 " << top1(watch, val) << " after " << history.size() << " logged steps\n";
}
