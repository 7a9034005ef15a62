// Knowledge distillation for a plant-disease classifier on leaf-spot
// features: a large teacher trained elsewhere is loaded from disk, frozen,
// and its temperature-softened predictions for the fixed training set are
// cached once; a small student for the field tablets then learns from the
// cache plus the hard labels. The teacher lives on its own card so the
// student's card stays free. Progress goes through a std::function hook
// installed by main(), and a latency benchmark runs before export.
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

constexpr int64_t kIn = 96, kClasses = 12, kTrain = 4096, kBatch = 128;

struct DistillConfig {
  std::string teacher_path = "teacher_leafspot.pt";
  // BUG(torch-device-index-unchecked): the teacher's card is ordinal 1;
  // no comparison with device_count() anywhere.
  std::string teacher_device = "cuda:1";
  double temperature = 4.0;
  double alpha = 0.7;
  int64_t epochs = 15;
};

struct TeacherImpl : torch::nn::Module {
  TeacherImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(kIn, 512), torch::nn::BatchNorm1d(512),
                                                         torch::nn::ReLU(), torch::nn::Dropout(0.2),
                                                         torch::nn::Linear(512, 512), torch::nn::ReLU(),
                                                         torch::nn::Linear(512, kClasses)))) {}
  torch::Tensor forward(const torch::Tensor &x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Teacher);

struct StudentImpl : torch::nn::Cloneable<StudentImpl> {
  StudentImpl() { reset(); }
  void reset() override {
    net = register_module("net", torch::nn::Sequential(torch::nn::Linear(kIn, 64), torch::nn::ReLU(),
                                                       torch::nn::Dropout(0.1), torch::nn::Linear(64, kClasses)));
  }
  torch::Tensor forward(const torch::Tensor &x) { return net->forward(x); }
  torch::nn::Sequential net{nullptr};
};
TORCH_MODULE(Student);

using StepHook = std::function<void(int64_t, const torch::Tensor &)>;

// Soft targets for the whole training set, computed once on the teacher's card
// and kept on the host, one chunk per student batch.
std::vector<torch::Tensor> cache_soft_targets(Teacher &teacher, const torch::Tensor &features,
                                              const torch::Device &teacher_dev, double temperature) {
  torch::NoGradGuard no_grad;
  teacher->eval();
  std::vector<torch::Tensor> cache;
  for (int64_t start = 0; start < features.size(0); start += kBatch) {
    auto logits = teacher->forward(features.narrow(0, start, kBatch).to(teacher_dev));
    auto soft = torch::softmax(logits / temperature, 1).cpu();
    // BUG(torch-tensor-to-discarded): pin_memory() returns a pinned copy;
    // the cache keeps the pageable one.
    soft.pin_memory();
    cache.push_back(soft);
  }
  return cache;
}

class Distiller {
 public:
  Distiller(Student student, torch::Device device, const DistillConfig &cfg)
      : student_(std::move(student)), device_(device), cfg_(cfg),
        opt_(student_->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)) {}

  // Must be called before fit().
  void set_hook(StepHook hook) { hook_ = std::move(hook); }

  void fit(const torch::Tensor &features, const torch::Tensor &labels, const std::vector<torch::Tensor> &soft) {
    int64_t step = 0;
    for (int64_t epoch = 0; epoch < cfg_.epochs; ++epoch) {
      student_->train();
      for (size_t b = 0; b < soft.size(); ++b) {
        const int64_t start = static_cast<int64_t>(b) * kBatch;
        auto x = features.narrow(0, start, kBatch).to(device_);
        auto y = labels.narrow(0, start, kBatch).to(device_);
        auto logits = student_->forward(x);
        auto log_p = torch::log_softmax(logits / cfg_.temperature, 1);
        // BUG(torch-device-mismatch): the cached soft targets were brought to
        // the host; the student's log-probabilities are on device_.
        auto kd = torch::nn::functional::kl_div(log_p, soft[b], torch::nn::functional::KLDivFuncOptions().reduction(torch::kBatchMean));
        auto loss = cfg_.alpha * cfg_.temperature * cfg_.temperature * kd +
                    (1 - cfg_.alpha) * torch::nn::functional::cross_entropy(logits, y);
        opt_.zero_grad();
        loss.backward();
        opt_.step();
        hook_(step++, loss.detach());
      }
    }
  }

 private:
  Student student_;
  torch::Device device_;
  DistillConfig cfg_;
  torch::optim::SGD opt_;
  StepHook hook_;
};

// Predicted classes of a held-out set, copied back without blocking; nothing
// when the set is empty.
std::optional<torch::Tensor> predict_async(Student &student, const torch::Tensor &held_out, const torch::Device &device) {
  if (held_out.size(0) == 0)
    return std::nullopt;
  torch::NoGradGuard no_grad;
  student->eval();
  auto pred = student->forward(held_out.to(device)).argmax(1);
  return pred.to(torch::kCPU, /*non_blocking=*/true);
}

double benchmark_latency(Student &student) {
  // BUG(torch-cuda-unguarded): the benchmark hard-codes "cuda" and runs on
  // every machine main() is started on.
  const torch::Device bench("cuda");
  auto probe = std::dynamic_pointer_cast<StudentImpl>(student->clone(bench));
  torch::NoGradGuard no_grad;
  probe->eval();
  auto x = torch::randn({1, kIn}, torch::TensorOptions().device(bench));
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i)
    probe->forward(x);
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / 200.0;
}

int main() {
  torch::manual_seed(139);
  const DistillConfig cfg;
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  auto features = torch::randn({kTrain, kIn});
  auto labels = torch::randint(0, kClasses, {kTrain}, torch::kLong);

  Teacher teacher;
  torch::Device teacher_dev = device;
  if (torch::cuda::is_available())
    teacher_dev = torch::Device(cfg.teacher_device);
  torch::load(teacher, cfg.teacher_path, teacher_dev);
  for (auto &p : teacher->parameters())
    p.set_requires_grad(false);
  auto soft = cache_soft_targets(teacher, features, teacher_dev, cfg.temperature);

  Student student;
  student->to(device);
  Distiller distiller(student, device, cfg);
  std::ofstream log("distill_loss.csv");
  distiller.set_hook([&log](int64_t step, const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): the hook runs after every optimiser step
    // and copies the device loss to the host each time.
    auto host = loss.to(torch::kCPU);
    log << step << "," << host.item<float>() << "\n";
  });
  distiller.fit(features, labels, soft);

  {
    torch::NoGradGuard no_grad;
    student->eval();
    auto x = features.narrow(0, 0, 512).to(device);
    // OK(torch-device-mismatch): both predictions and labels are moved.
    auto acc = student->forward(x).argmax(1).eq(labels.narrow(0, 0, 512).to(device)).to(torch::kFloat).mean();
    std::cout << "student train acc " << acc.item<float>() << "\n";
  }
  auto held_out = torch::randn({256, kIn});
  if (auto pred = predict_async(student, held_out, device)) {
    // BUG(torch-non-blocking-d2h-race): the optional holds a copy that may
    // still be in flight; the accessor reads it straight away.
    auto top = pred->accessor<int64_t, 1>();
    auto counts = torch::bincount(*pred, {}, kClasses);
    std::cout << "first held-out prediction " << top[0] << ", class histogram " << counts << "\n";
  }
  std::cout << "student latency " << benchmark_latency(student) << " ms\n";
  torch::save(student, "student_leafspot.pt");
  return 0;
}
