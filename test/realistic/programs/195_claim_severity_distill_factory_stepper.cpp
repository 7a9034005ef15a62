// Claim-severity regression for a motor insurer's pricing team: 18 numeric
// rating factors plus vehicle class and region (embedded), log-severity as
// the target. A wide teacher MLP is fitted first; a factory then builds a
// distillation trainer (std::unique_ptr) that trains a narrow student for
// the quoting service with an optimizer wrapper that only steps every
// `accum` batches, and keeps an EMA shadow of the student for release.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

constexpr int64_t kNumeric = 18, kVehicleClasses = 12, kRegions = 40;

struct TabularNetImpl : torch::nn::Cloneable<TabularNetImpl> {
  explicit TabularNetImpl(int64_t width) : width_(width) { reset(); }

  void reset() override {
    vehicle = register_module("vehicle", torch::nn::Embedding(kVehicleClasses, 8));
    region = register_module("region", torch::nn::Embedding(kRegions, 6));
    mlp = register_module("mlp", torch::nn::Sequential(torch::nn::Linear(kNumeric + 14, width_),
                                                       torch::nn::BatchNorm1d(width_), torch::nn::ReLU(),
                                                       torch::nn::Dropout(0.2), torch::nn::Linear(width_, width_ / 2),
                                                       torch::nn::ReLU(), torch::nn::Linear(width_ / 2, 1)));
  }

  torch::Tensor forward(const torch::Tensor &numeric, const torch::Tensor &cats) {
    auto x = torch::cat({numeric, vehicle(cats.select(1, 0)), region(cats.select(1, 1))}, 1);
    return mlp->forward(x).squeeze(1);
  }

  int64_t width_;
  torch::nn::Embedding vehicle{nullptr}, region{nullptr};
  torch::nn::Sequential mlp{nullptr};
};
TORCH_MODULE(TabularNet);

struct Policies {
  torch::Tensor numeric, cats, log_severity;
};

std::vector<Policies> synth_book(int64_t batches, int64_t n, torch::Device device) {
  std::vector<Policies> out;
  auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  for (int64_t b = 0; b < batches; ++b) {
    auto numeric = torch::randn({n, kNumeric}, device);
    auto cats = torch::stack({torch::randint(kVehicleClasses, {n}, long_opts), torch::randint(kRegions, {n}, long_opts)}, 1);
    auto y = 7.0 + 0.4 * numeric.select(1, 0) - 0.2 * numeric.select(1, 3) + 0.05 * cats.select(1, 0).to(torch::kFloat);
    out.push_back({numeric, cats, y + 0.1 * torch::randn({n}, device)});
  }
  return out;
}

// Wraps AdamW so that callers can backward() every batch and let the wrapper
// decide when the accumulated gradients are applied.
class AccumulatingAdamW {
 public:
  AccumulatingAdamW(std::vector<torch::Tensor> params, double lr, int every)
      : opt_(std::move(params), torch::optim::AdamWOptions(lr).weight_decay(1e-4)), every_(every) {}

  bool step_if_ready() {
    if (++pending_ < every_)
      return false;
    // OK(torch-missing-zero-grad): the reset follows the step on the only path that steps.
    opt_.step();
    opt_.zero_grad();
    pending_ = 0;
    return true;
  }
  void reset() {
    opt_.zero_grad();
    pending_ = 0;
  }
  int every() const { return every_; }

 private:
  torch::optim::AdamW opt_;
  int every_;
  int pending_ = 0;
};

struct DistillConfig {
  int64_t student_width = 32;
  int accum = 4;
  int epochs = 6;
  double lr = 2e-3;
  double ema_decay = 0.995;
};

class DistillTrainer {
 public:
  DistillTrainer(TabularNet teacher, TabularNet student, const DistillConfig &cfg)
      : teacher_(std::move(teacher)), student_(std::move(student)),
        ema_(std::dynamic_pointer_cast<TabularNetImpl>(student_->clone())),
        opt_(student_->parameters(), cfg.lr, cfg.accum), cfg_(cfg) {
    ema_->eval();
    for (auto &p : ema_->parameters())
      p.set_requires_grad(false);
  }

  void fit(const std::vector<Policies> &book) {
    student_->train();
    opt_.reset();
    for (int epoch = 0; epoch < cfg_.epochs; ++epoch) {
      for (const auto &b : book) {
        torch::Tensor soft;
        {
          torch::NoGradGuard no_grad;
          // BUG(torch-eval-mode-missing): main() hands over the teacher
          // straight from fit_teacher(), still in training mode: the targets
          // carry dropout noise and the teacher's BatchNorm stats drift.
          soft = teacher_->forward(b.numeric, b.cats);
        }
        auto pred = student_->forward(b.numeric, b.cats);
        auto loss = torch::mse_loss(pred, soft) + torch::smooth_l1_loss(pred, b.log_severity);
        // OK(torch-grad-accumulation-unscaled): scaled by the wrapper's accumulation count.
        (loss / opt_.every()).backward();
        if (opt_.step_if_ready())
          update_ema();
      }
    }
  }

  // Extra passes over the large claims (above the reinsurance retention),
  // against the observed severities only.
  void refit_tail(const std::vector<Policies> &large_claims) {
    student_->train();
    opt_.reset();
    for (const auto &b : large_claims) {
      auto loss = torch::mse_loss(student_->forward(b.numeric, b.cats), b.log_severity);
      // BUG(torch-grad-accumulation-unscaled): step_if_ready() applies the sum
      // of `accum` batches' gradients; this mean loss is not divided by it.
      loss.backward();
      if (opt_.step_if_ready())
        update_ema();
    }
  }

  // Mean absolute error in log-severity of the EMA shadow.
  double shadow_mae(const std::vector<Policies> &holdout) {
    torch::NoGradGuard no_grad;
    double err = 0.0;
    for (const auto &b : holdout) {
      // OK(torch-eval-mode-missing): the shadow was put in eval mode by the constructor and never trained.
      auto pred = ema_->forward(b.numeric, b.cats);
      err += (pred - b.log_severity).abs().mean().item<double>();
    }
    return err / static_cast<double>(holdout.size());
  }

  std::shared_ptr<TabularNetImpl> shadow() const { return ema_; }

 private:
  void update_ema() {
    torch::NoGradGuard no_grad;
    auto src = student_->parameters();
    auto dst = ema_->parameters();
    for (size_t i = 0; i < src.size(); ++i)
      dst[i].mul_(cfg_.ema_decay).add_(src[i], 1.0 - cfg_.ema_decay);
    auto src_buf = student_->buffers();
    auto dst_buf = ema_->buffers();
    for (size_t i = 0; i < src_buf.size(); ++i)
      dst_buf[i].copy_(src_buf[i]);
  }

  TabularNet teacher_, student_;
  std::shared_ptr<TabularNetImpl> ema_;
  AccumulatingAdamW opt_;
  DistillConfig cfg_;
};

std::unique_ptr<DistillTrainer> make_trainer(TabularNet teacher, const DistillConfig &cfg, torch::Device device) {
  TabularNet student(cfg.student_width);
  student->to(device);
  return std::make_unique<DistillTrainer>(std::move(teacher), student, cfg);
}

void fit_teacher(TabularNet &teacher, const std::vector<Policies> &book, const std::vector<Policies> &holdout, int epochs) {
  torch::optim::Adam opt(teacher->parameters(), torch::optim::AdamOptions(1e-3));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    teacher->train();
    double running = 0.0;
    for (const auto &b : book) {
      opt.zero_grad();
      auto loss = torch::mse_loss(teacher->forward(b.numeric, b.cats), b.log_severity);
      loss.backward();
      opt.step();
      // BUG(torch-host-sync-in-loop): .item() on every batch stalls the GPU queue.
      running += loss.item<double>();
    }
    teacher->eval();
    torch::NoGradGuard no_grad;
    double mae = 0.0;
    for (const auto &b : holdout)
      // OK(torch-eval-mode-missing): eval() at the top of the validation pass.
      mae += (teacher->forward(b.numeric, b.cats) - b.log_severity).abs().mean().item<double>();
    std::cout << "teacher epoch " << epoch << " train mse " << running / book.size() << " holdout mae "
              << mae / holdout.size() << '\n';
  }
  teacher->train();
}

int main() {
  torch::manual_seed(195);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto book = synth_book(120, 256, device);
  auto holdout = synth_book(10, 256, device);

  TabularNet teacher(256);
  teacher->to(device);
  fit_teacher(teacher, book, holdout, 5);

  DistillConfig cfg;
  auto trainer = make_trainer(teacher, cfg, device);
  trainer->fit(book);
  trainer->refit_tail(synth_book(16, 256, device));
  std::cout << "shadow holdout mae " << trainer->shadow_mae(holdout) << '\n';
  torch::save(trainer->shadow(), "claim_severity_student.pt");
  return 0;
}
