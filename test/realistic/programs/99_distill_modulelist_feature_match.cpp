// Knowledge distillation of a wide MLP teacher (a torch::nn::Sequential
// loaded from a checkpoint) into a narrow student whose hidden layers are a
// ModuleList walked by hand. The loss mixes soft targets at temperature T,
// hard labels, and a feature-matching term through a projection of the
// student's last hidden layer. A smoothed loss over the last 50 steps is
// kept for the progress bar.
#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <iostream>
#include <string>

constexpr int64_t kIn = 256, kClasses = 20, kTeacherHidden = 1024, kStudentHidden = 128;

torch::nn::Sequential make_teacher() {
  return torch::nn::Sequential(torch::nn::Linear(kIn, kTeacherHidden), torch::nn::ReLU(),
                               torch::nn::Linear(kTeacherHidden, kTeacherHidden), torch::nn::ReLU(),
                               torch::nn::Linear(kTeacherHidden, kClasses));
}

struct StudentImpl : torch::nn::Module {
  StudentImpl() : layers(register_module("layers", torch::nn::ModuleList())) {
    layers->push_back(torch::nn::Linear(kIn, kStudentHidden));
    layers->push_back(torch::nn::Linear(kStudentHidden, kStudentHidden));
    head = register_module("head", torch::nn::Linear(kStudentHidden, kClasses));
  }
  // Returns the logits and the last hidden activation.
  std::pair<torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    for (const auto &layer : *layers)
      x = torch::relu(layer->as<torch::nn::Linear>()->forward(x));
    return {head->forward(x), x};
  }
  torch::nn::ModuleList layers;
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Student);

std::pair<torch::Tensor, torch::Tensor> teacher_outputs(torch::nn::Sequential &teacher, const torch::Tensor &x) {
  // Hidden activation after the second ReLU, and the logits.
  auto h = x;
  for (size_t i = 0; i + 1 < teacher->size(); ++i)
    h = teacher[i]->as<torch::nn::Linear>() ? teacher[i]->as<torch::nn::Linear>()->forward(h) : torch::relu(h);
  return {teacher[teacher->size() - 1]->as<torch::nn::Linear>()->forward(h), h};
}

int main() {
  torch::Device device = torch::kCPU;
  if (torch::cuda::is_available())
    device = torch::kCUDA;

  auto teacher = make_teacher();
  torch::load(teacher, "teacher_mlp.pt");
  teacher->to(device);
  teacher->eval();

  Student student;
  student->to(device);
  torch::nn::Linear proj(kStudentHidden, kTeacherHidden);
  torch::optim::Adam opt(student->parameters(), torch::optim::AdamOptions(1e-3));
  opt.add_param_group(torch::optim::OptimizerParamGroup(proj->parameters()));

  const double T = 4.0, alpha = 0.7, beta = 0.1;
  std::deque<torch::Tensor> recent;
  int64_t agree = 0;
  for (int64_t step = 0; step < 10000; ++step) {
    auto x = torch::randn({128, kIn}).to(device);
    auto y = torch::randint(0, kClasses, {128}, torch::TensorOptions().dtype(torch::kLong).device(device));
    torch::Tensor t_logits, t_hidden;
    {
      torch::NoGradGuard no_grad;
      // OK(torch-inference-without-no-grad): the teacher runs under the guard.
      std::tie(t_logits, t_hidden) = teacher_outputs(teacher, x);
    }
    auto [s_logits, s_hidden] = student->forward(x);
    auto soft = torch::kl_div(torch::log_softmax(s_logits / T, 1), torch::softmax(t_logits / T, 1),
                              at::Reduction::Mean) * (T * T);
    auto hard = torch::nn::functional::cross_entropy(s_logits, y);
    // BUG(torch-device-mismatch): the projection was created after the
    // student was moved and never moved itself; its input is on the device.
    auto fm = torch::mse_loss(proj->forward(s_hidden), t_hidden);
    auto loss = alpha * soft + (1 - alpha) * hard + beta * fm;
    opt.zero_grad();
    loss.backward();
    opt.step();

    // BUG(torch-loss-accumulation-graph): the window keeps the last 50
    // losses with their graphs.
    recent.push_back(loss);
    if (recent.size() > 50)
      recent.pop_front();
    // BUG(torch-host-sync-in-loop): agreement with the teacher is read back
    // on every step.
    agree += (s_logits.argmax(1) == t_logits.argmax(1)).sum().item<int64_t>();
    if (step % 200 == 0) {
      double smooth = 0;
      for (const auto &l : recent)
        // OK(torch-host-sync-in-loop): only on logging steps.
        smooth += l.item<double>();
      std::cout << "step " << step << " loss " << smooth / recent.size() << " agree "
                << static_cast<double>(agree) / ((step + 1) * 128) << "\n";
    }
  }

  // Teacher and student accuracy on the same held-out batches.
  student->eval();
  int64_t t_correct = 0, s_correct = 0;
  for (int b = 0; b < 40; ++b) {
    auto xv = torch::randn({256, kIn}).to(device);
    auto yv = torch::randint(0, kClasses, {256}, torch::TensorOptions().dtype(torch::kLong).device(device));
    // BUG(torch-inference-without-no-grad): a loop that never calls backward
    // runs the teacher with autograd recording.
    auto tv = teacher->forward(xv);
    t_correct += (tv.argmax(1) == yv).sum().item<int64_t>();
    {
      torch::NoGradGuard no_grad;
      s_correct += (std::get<0>(student->forward(xv)).argmax(1) == yv).sum().item<int64_t>();
    }
  }
  std::cout << "teacher " << t_correct / 10240.0 << " student " << s_correct / 10240.0 << "\n";
  torch::save(student, "student.pt");
  return 0;
}
