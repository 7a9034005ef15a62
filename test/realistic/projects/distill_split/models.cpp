// Networks, device choice, the temperature schedule and the distillation
// loss.
#include "distill.h"

#include <cmath>
#include <iostream>

torch::Device pick_device() {
  if (torch::cuda::is_available()) {
    std::cout << "distilling on " << torch::cuda::device_count() << " visible GPU(s)\n";
    return torch::Device(torch::kCUDA);
  }
  std::cout << "no GPU, distilling on the CPU\n";
  return torch::Device(torch::kCPU);
}

Teacher load_teacher(const std::string &path, torch::Device device) {
  Teacher teacher;
  torch::load(teacher, path);
  teacher->to(device);
  teacher->eval();
  std::cout << "teacher: " << count_parameters(*teacher) << " parameters\n";
  return teacher;
}

Student make_student(torch::Device device) {
  Student student;
  student->to(device);
  std::cout << "student: " << count_parameters(*student) << " parameters\n";
  return student;
}

int64_t count_parameters(torch::nn::Module &module) {
  int64_t n = 0;
  for (const auto &p : module.parameters())
    n += p.numel();
  return n;
}

// Cosine decay of the softening temperature over the run.
double temperature_at(int64_t step, int64_t total, double start, double end) {
  const double progress = total <= 1 ? 1.0 : static_cast<double>(step) / static_cast<double>(total - 1);
  return end + 0.5 * (start - end) * (1.0 + std::cos(M_PI * progress));
}

void save_student(Student &student, const std::string &path) {
  torch::save(student, path);
  std::cout << "student saved to " << path << '\n';
}

// Hinton et al.: KL between the softened distributions, scaled by T^2, mixed
// with the hard-label cross entropy.
torch::Tensor distill_loss(const torch::Tensor &student_logits, const torch::Tensor &teacher_logits,
                           const torch::Tensor &labels, double temperature, double alpha) {
  namespace F = torch::nn::functional;
  auto soft_student = F::log_softmax(student_logits / temperature, F::LogSoftmaxFuncOptions(1));
  auto soft_teacher = F::softmax(teacher_logits / temperature, F::SoftmaxFuncOptions(1));
  auto kd = F::kl_div(soft_student, soft_teacher, F::KLDivFuncOptions().reduction(torch::kBatchMean)) *
            (temperature * temperature);
  auto ce = F::cross_entropy(student_logits, labels);
  return alpha * kd + (1.0 - alpha) * ce;
}
