// The distillation loop: the teacher runs without autograd, the student
// learns from its softened outputs and from the labels. main() reads the
// command line.
#include "distill.h"

#include <cstdlib>
#include <iostream>

namespace {

double evaluate_student(Student &student, const Normalizer &norm, torch::Device device, int64_t batches) {
  torch::NoGradGuard no_grad;
  student->eval();
  int64_t correct = 0, seen = 0;
  for (int64_t b = 0; b < batches; ++b) {
    auto batch = synth_batch(512, 10000 + static_cast<uint64_t>(b));
    // OK(torch-inference-without-no-grad): the guard above covers the loop.
    auto logits = student->forward(norm.apply(batch.features).to(device));
    correct += logits.argmax(1).eq(batch.labels.to(device)).sum().item<int64_t>();
    seen += 512;
  }
  student->train();
  return static_cast<double>(correct) / static_cast<double>(seen);
}

}  // namespace

void run_distillation(const DistillConfig &cfg) {
  auto device = pick_device();
  auto teacher = load_teacher(cfg.teacher_path, device);
  auto student = make_student(device);
  student->train();
  torch::optim::SGD opt(student->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true));

  Normalizer norm;
  norm.fit(16, 1024);

  auto kd_sum = torch::zeros({}, device);
  double agreement = 0;
  for (int64_t step = 0; step < cfg.steps; ++step) {
    auto batch = synth_batch(cfg.batch, static_cast<uint64_t>(step));
    auto features = norm.apply(batch.features);
    // BUG(torch-non-blocking-pageable): synth_batch() and Normalizer::apply()
    // (data.cpp) build the features in pageable memory; upload() (data.cpp)
    // copies them with non_blocking=true, which runs synchronously.
    auto x = upload(features, device);

    torch::Tensor teacher_logits;
    {
      torch::NoGradGuard no_grad;
      teacher_logits = teacher->forward(x);
    }
    auto student_logits = student->forward(x);
    const double t = temperature_at(step, cfg.steps, cfg.temperature, cfg.final_temperature);
    // BUG(torch-device-mismatch): distill_loss() (models.cpp) combines the
    // student's logits on 'device' with the labels, which synth_batch() left
    // on the CPU, in cross_entropy.
    auto loss = distill_loss(student_logits, teacher_logits, batch.labels, t, cfg.alpha);
    opt.zero_grad();
    loss.backward();
    opt.step();

    // OK(torch-loss-accumulation-graph): detached before it is summed.
    kd_sum += loss.detach();
    agreement += top1_agreement(student_logits, teacher_logits);
    if ((step + 1) % 200 == 0) {
      // OK(torch-host-sync-in-loop): read every 200 steps.
      std::cout << "step " << step + 1 << " T " << t << " loss " << (kd_sum / 200.0).item<double>()
                << " agreement " << agreement / 200.0 << '\n';
      kd_sum.zero_();
      agreement = 0;
    }
  }
  std::cout << "student accuracy " << evaluate_student(student, norm, device, 20) << '\n';
  save_student(student, cfg.student_path);
}

int main(int argc, char **argv) {
  DistillConfig cfg;
  if (argc > 1) cfg.teacher_path = argv[1];
  if (argc > 2) cfg.steps = std::atoll(argv[2]);
  if (argc > 3) cfg.student_path = argv[3];
  run_distillation(cfg);
  return 0;
}
