// Crop disease classification from leaf photos (3x64x64 crops, 9 classes).
// A wide teacher trained on the full archive is distilled into a compact
// student whose layers come from a BackboneConfig; the student lives behind a
// std::unique_ptr<StudentWrapper>, which also serves the field app. The
// phase of a network is always set through set_mode() so every entry point
// agrees on what "evaluate" means.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace leaf {

constexpr int64_t kClasses = 9, kSide = 64;

struct LeafBatch {
  torch::Tensor image;  // [B, 3, 64, 64]
  torch::Tensor label;  // [B]
};

std::vector<LeafBatch> synth(int64_t batches, int64_t batch_size, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<LeafBatch> out;
  for (int64_t i = 0; i < batches; ++i) {
    auto label = torch::randint(kClasses, {batch_size}, gen, torch::TensorOptions().dtype(torch::kLong));
    auto image = torch::rand({batch_size, 3, kSide, kSide}, gen);
    image.select(1, 1).add_(0.05 * label.to(torch::kFloat).view({batch_size, 1, 1}));
    out.push_back({image, label});
  }
  return out;
}

enum class Phase { Fit, Evaluate };

void set_mode(nn::Module &m, Phase phase) {
  switch (phase) {
    case Phase::Fit:
      m.train();
      break;
    case Phase::Evaluate:
      m.eval();
      break;
  }
}

torch::Device pick_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

struct TeacherNetImpl : nn::Module {
  TeacherNetImpl()
      : features(register_module(
            "features", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(3, 64, 3).padding(1)), nn::BatchNorm2d(64),
                                       nn::ReLU(), nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(64, 128, 3).padding(1)),
                                       nn::BatchNorm2d(128), nn::ReLU(), nn::AdaptiveAvgPool2d(1)))),
        drop(register_module("drop", nn::Dropout(0.3))),
        fc(register_module("fc", nn::Linear(128, kClasses))) {}
  torch::Tensor forward(const torch::Tensor &x) { return fc->forward(drop->forward(features->forward(x).flatten(1))); }
  nn::Sequential features;
  nn::Dropout drop;
  nn::Linear fc;
};
TORCH_MODULE(TeacherNet);

struct BackboneConfig {
  std::vector<int64_t> widths{16, 32, 64};
  bool batch_norm = true;
  double dropout = 0.2;
};

nn::Sequential build_student(const BackboneConfig &cfg) {
  nn::Sequential seq;
  int64_t in = 3;
  for (int64_t w : cfg.widths) {
    seq->push_back(nn::Conv2d(nn::Conv2dOptions(in, w, 3).padding(1).stride(2)));
    if (cfg.batch_norm)
      seq->push_back(nn::BatchNorm2d(w));
    seq->push_back(nn::ReLU());
    in = w;
  }
  seq->push_back(nn::AdaptiveAvgPool2d(1));
  seq->push_back(nn::Flatten());
  seq->push_back(nn::Dropout(cfg.dropout));
  seq->push_back(nn::Linear(in, kClasses));
  return seq;
}

class StudentWrapper {
 public:
  explicit StudentWrapper(const BackboneConfig &cfg) : body_(build_student(cfg)) {}
  nn::Sequential &body() { return body_; }
  void to(const torch::Device &device) { body_->to(device); }
  std::vector<torch::Tensor> parameters() const { return body_->parameters(); }

  // Class probabilities for the field app.
  torch::Tensor predict_proba(const torch::Tensor &x) {
    torch::NoGradGuard no_grad;
    // OK(torch-eval-mode-missing): main() sets Phase::Evaluate before it serves.
    return torch::softmax(body_->forward(x), 1);
  }

 private:
  nn::Sequential body_;
};

void teacher_step(TeacherNet &net, torch::optim::Optimizer &opt, const LeafBatch &b, const torch::Device &device) {
  auto loss = F::cross_entropy(net->forward(b.image.to(device)), b.label.to(device));
  loss.backward();
  // BUG(torch-missing-zero-grad): pretrain_teacher() clears the gradients once
  // per epoch, so each step applies the sum of all the epoch's gradients so far.
  opt.step();
}

void pretrain_teacher(TeacherNet &teacher, const std::vector<LeafBatch> &data, const torch::Device &device, int epochs) {
  torch::optim::SGD opt(teacher->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  set_mode(*teacher, Phase::Fit);
  for (int e = 0; e < epochs; ++e) {
    opt.zero_grad();
    for (const auto &b : data)
      teacher_step(teacher, opt, b, device);
  }
}

class Distiller {
 public:
  Distiller(TeacherNet teacher, const torch::Device &device, double temperature)
      : teacher_(std::move(teacher)), device_(device), temperature_(temperature),
        log_prior_(torch::log(torch::tensor({0.22, 0.15, 0.12, 0.11, 0.10, 0.09, 0.08, 0.07, 0.06}, torch::kFloat))) {
    // The teacher only produces soft targets from here on: freeze it once.
    for (auto &p : teacher_->parameters())
      p.requires_grad_(false);
  }

  // One distillation epoch; returns the last logged loss.
  double fit_epoch(StudentWrapper &student, torch::optim::Optimizer &opt, const std::vector<LeafBatch> &data) {
    double last = 0.0;
    int64_t step = 0;
    for (const auto &b : data) {
      auto x = b.image.to(device_), y = b.label.to(device_);
      torch::Tensor soft;
      {
        torch::NoGradGuard no_grad;
        // BUG(torch-eval-mode-missing): the constructor froze the teacher's
        // weights but never called eval(): its dropout and batch norm still
        // run in training mode when it produces the soft targets.
        soft = torch::softmax(teacher_->forward(x) / temperature_, 1);
      }
      opt.zero_grad();
      // BUG(torch-eval-mode-missing): main() set Phase::Evaluate for the
      // baseline and nothing sets Phase::Fit again: the student trains with
      // dropout off and frozen batch statistics.
      auto logits = student.body()->forward(x);
      // BUG(torch-device-mismatch): the class prior was built on the CPU in
      // the constructor; the logits are on `device_`.
      auto adjusted = logits + log_prior_;
      auto kd = F::kl_div(torch::log_softmax(adjusted / temperature_, 1), soft,
                          F::KLDivFuncOptions().reduction(torch::kBatchMean)) *
                (temperature_ * temperature_);
      auto loss = 0.7 * kd + 0.3 * F::cross_entropy(adjusted, y);
      loss.backward();
      opt.step();
      if (++step % 50 == 0)
        // OK(torch-host-sync-in-loop): every 50 steps.
        last = loss.item<double>();
    }
    return last;
  }

 private:
  TeacherNet teacher_;
  torch::Device device_;
  double temperature_;
  torch::Tensor log_prior_;
};

double accuracy(StudentWrapper &student, const std::vector<LeafBatch> &data, const torch::Device &device) {
  torch::NoGradGuard no_grad;
  int64_t correct = 0, total = 0;
  for (const auto &b : data) {
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): both callers set Phase::Evaluate; guard above.
    auto pred = student.body()->forward(b.image.to(device)).argmax(1);
    correct += pred.eq(b.label.to(device)).sum().item<int64_t>();
    total += b.label.size(0);
  }
  return static_cast<double>(correct) / std::max<int64_t>(total, 1);
}

// Test-time augmentation: the mean probability over flips.
torch::Tensor tta_predict(StudentWrapper &student, const torch::Tensor &x) {
  std::vector<torch::Tensor> views{x, x.flip({3}), x.flip({2})};
  auto acc = torch::zeros({x.size(0), kClasses}, x.options());
  for (const auto &v : views) {
    // BUG(torch-inference-without-no-grad): no guard: the three forwards keep
    // their activations for a backward that never comes.
    // OK(torch-loss-accumulation-graph): the sum is returned, nothing trains here.
    // OK(torch-eval-mode-missing): main() sets Phase::Evaluate before it calls this.
    acc += torch::softmax(student.body()->forward(v), 1);
  }
  return acc / static_cast<double>(views.size());
}

}  // namespace leaf

using namespace leaf;

int main() {
  torch::manual_seed(285);
  const torch::Device device = pick_device();
  auto archive = synth(80, 32, 1), field = synth(40, 32, 2), val = synth(10, 32, 3);

  TeacherNet teacher;
  teacher->to(device);
  pretrain_teacher(teacher, archive, device, 4);
  Distiller distiller(teacher, device, 4.0);

  BackboneConfig cfg;
  cfg.widths = {24, 48, 96};
  auto student = std::make_unique<StudentWrapper>(cfg);
  student->to(device);
  set_mode(*student->body(), Phase::Evaluate);
  std::cout << "student baseline acc " << accuracy(*student, val, device) << '\n';

  torch::optim::AdamW opt(student->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(5e-4));
  for (int epoch = 0; epoch < 8; ++epoch)
    std::cout << "epoch " << epoch << " kd loss " << distiller.fit_epoch(*student, opt, field) << '\n';

  set_mode(*student->body(), Phase::Evaluate);
  std::cout << "distilled acc " << accuracy(*student, val, device) << '\n';
  auto sample = val.front().image.to(device);
  auto proba = student->predict_proba(sample);
  auto tta = tta_predict(*student, sample);
  std::cout << "tta agreement " << proba.argmax(1).eq(tta.argmax(1)).to(torch::kFloat).mean().item<double>() << '\n';
  return 0;
}
