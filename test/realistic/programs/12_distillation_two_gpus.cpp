// Knowledge distillation with the teacher on a second GPU: the devices are
// kept in a setup struct, the teacher runs under NoGradGuard every step.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>

struct DistillConfig {
  int64_t batch = 64;
  int64_t in = 512;
  int64_t classes = 100;
  int64_t steps = 1000;
  double temperature = 4.0;
  double alpha = 0.7;
};

struct DistillSetup {
  torch::Device student;
  torch::Device teacher;
};

DistillSetup make_setup() {
  // OK(torch-cuda-unguarded): main() returns early when CUDA is unavailable.
  torch::Device student(torch::kCUDA, 0);
  // BUG(torch-device-index-unchecked): nothing compares device_count() with
  // 2; a job given one GPU sees only cuda:0.
  torch::Device teacher("cuda:1");
  return {student, teacher};
}

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in, int64_t hidden, int64_t out)
      : fc1(register_module("fc1", torch::nn::Linear(in, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, out))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

torch::Tensor distill_loss(const torch::Tensor &student_logits, const torch::Tensor &teacher_logits,
                           const torch::Tensor &labels, const DistillConfig &cfg) {
  namespace F = torch::nn::functional;
  auto soft = F::kl_div(F::log_softmax(student_logits / cfg.temperature, F::LogSoftmaxFuncOptions(1)),
                        F::softmax(teacher_logits / cfg.temperature, F::SoftmaxFuncOptions(1)),
                        F::KLDivFuncOptions().reduction(torch::kBatchMean));
  auto hard = F::cross_entropy(student_logits, labels);
  return cfg.alpha * soft * cfg.temperature * cfg.temperature + (1 - cfg.alpha) * hard;
}

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "distillation needs CUDA\n";
    return 1;
  }
  DistillConfig cfg;
  auto setup = make_setup();
  Mlp teacher(cfg.in, 2048, cfg.classes), student(cfg.in, 256, cfg.classes);
  teacher->to(setup.teacher);
  student->to(setup.student);
  teacher->eval();
  torch::optim::Adam opt(student->parameters(), torch::optim::AdamOptions(1e-3));

  auto total = torch::zeros({}, setup.student);
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto x = torch::randn({cfg.batch, cfg.in});
    auto labels = torch::randint(0, cfg.classes, {cfg.batch}, torch::kLong).to(setup.student);
    torch::Tensor teacher_logits;
    {
      torch::NoGradGuard no_grad;
      // OK(torch-inference-without-no-grad): the teacher runs under NoGradGuard.
      teacher_logits = teacher->forward(x.to(setup.teacher));
    }
    auto student_logits = student->forward(x.to(setup.student));
    // BUG(torch-device-mismatch): the teacher's logits stay on cuda:1, the
    // student's are on cuda:0; distill_loss() combines them.
    auto loss = distill_loss(student_logits, teacher_logits, labels, cfg);
    opt.zero_grad();
    loss.backward();
    opt.step();
    total += loss.detach();
  }
  std::cout << "mean distillation loss " << (total / cfg.steps).item<double>() << '\n';
  return 0;
}
