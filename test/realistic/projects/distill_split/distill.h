// Knowledge distillation split over three files: data.cpp synthesises and
// normalises the batches and uploads them, models.cpp builds the networks,
// chooses the device and defines the loss, train.cpp runs the distillation
// loop and holds main().
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

constexpr int64_t kFeat = 48;
constexpr int64_t kClasses = 12;

struct TeacherImpl : torch::nn::Module {
  TeacherImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kFeat, 512))),
        fc2(register_module("fc2", torch::nn::Linear(512, 512))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        head(register_module("head", torch::nn::Linear(512, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc1(x));
    x = drop(torch::relu(fc2(x)));
    return head(x);
  }
  torch::nn::Linear fc1, fc2;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
};
TORCH_MODULE(Teacher);

struct StudentImpl : torch::nn::Module {
  StudentImpl()
      : fc(register_module("fc", torch::nn::Linear(kFeat, 64))),
        drop(register_module("drop", torch::nn::Dropout(0.1))),
        head(register_module("head", torch::nn::Linear(64, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) { return head(drop(torch::relu(fc(x)))); }
  torch::nn::Linear fc;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
};
TORCH_MODULE(Student);

struct FeatureBatch {
  torch::Tensor features;
  torch::Tensor labels;
};

struct DistillConfig {
  std::string teacher_path = "teacher.pt";
  int64_t steps = 3000;
  int64_t batch = 256;
  double temperature = 4.0;
  double final_temperature = 1.5;
  std::string student_path = "student.pt";
  double alpha = 0.7;
};

// data.cpp
class Normalizer {
 public:
  void fit(int64_t batches, int64_t batch_size);
  torch::Tensor apply(const torch::Tensor &features) const;
  bool fitted() const { return mean_.defined(); }

 private:
  torch::Tensor mean_;
  torch::Tensor inv_std_;
};

FeatureBatch synth_batch(int64_t n, uint64_t step);
torch::Tensor upload(const torch::Tensor &host, torch::Device device);
double top1_agreement(const torch::Tensor &student_logits, const torch::Tensor &teacher_logits);

// models.cpp
torch::Device pick_device();
Teacher load_teacher(const std::string &path, torch::Device device);
Student make_student(torch::Device device);
int64_t count_parameters(torch::nn::Module &module);
double temperature_at(int64_t step, int64_t total, double start, double end);
void save_student(Student &student, const std::string &path);
torch::Tensor distill_loss(const torch::Tensor &student_logits, const torch::Tensor &teacher_logits,
                           const torch::Tensor &labels, double temperature, double alpha);

// train.cpp
void run_distillation(const DistillConfig &cfg);
