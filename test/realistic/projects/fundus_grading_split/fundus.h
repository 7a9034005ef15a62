// Diabetic retinopathy screening for a network of eye clinics: a CNN grades
// colour fundus photographs on the five-step international scale (none,
// mild, moderate, severe, proliferative), and a small quality gate rejects
// photographs too dark or blurred to grade, so that ungradable patients are
// recalled instead of being told they are fine. Training runs in phases: a
// linear probe of the grading head on the frozen backbone, fine-tuning of
// the whole network with gradient accumulation, the quality gate, and the
// adaptation to a new clinic's camera. Split over four files: common.cpp
// renders the synthetic photographs and holds the losses, the loss meter and
// the mixed-precision helpers (amp.h), model.cpp the networks and their
// evaluation and screening, step.cpp one optimisation step of each phase,
// train.cpp the phase loops and main().
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

constexpr int64_t kSide = 96;   // photographs are resized to kSide x kSide
constexpr int64_t kGrades = 5;  // ICDR grades 0..4; grade >= 2 is referable
constexpr uint64_t kTrainSeed = 1000;
constexpr uint64_t kValSeed = 900000;
constexpr uint64_t kGateSeed = 700000;
constexpr uint64_t kSiteSeed = 500000;
constexpr uint64_t kClinicSeed = 300000;

struct RunConfig {
  int64_t width = 24;
  int64_t batch = 32;
  int64_t probe_steps = 300;       // phase 1
  int64_t epochs = 6;              // phase 2
  int64_t micro_batches = 200;     // per epoch
  int64_t accum = 4;               // micro-batches per update
  int64_t val_batches = 20;
  int64_t gate_steps = 400;        // phase 3
  int64_t site_micro_batches = 160; // phase 4: batches of batch / site_accum
  int64_t site_accum = 8;
  double probe_lr = 0.05;
  double lr = 3e-4;
  bool amp = false;                // CUDA mixed precision where it helps
  std::string checkpoint = "dr_grader.pt";
};

struct FundusBatch {
  torch::Tensor images;    // [B, 3, S, S]
  torch::Tensor grades;    // [B], int64 ICDR grade
  torch::Tensor gradable;  // [B], float 0/1
};

struct GraderNetImpl : torch::nn::Module {
  explicit GraderNetImpl(int64_t width);
  torch::Tensor forward(torch::Tensor images);  // [B, kGrades] logits

  torch::nn::Sequential backbone{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(GraderNet);

struct QualityNetImpl : torch::nn::Module {
  QualityNetImpl();
  torch::Tensor forward(torch::Tensor images);  // [B, 1] logit of "gradable"

  torch::nn::Sequential body{nullptr};
};
TORCH_MODULE(QualityNet);

// Sample-weighted running mean of a loss over an epoch.
class LossMeter {
 public:
  void update(const torch::Tensor &loss, int64_t n);
  double mean() const;
  void reset();

 private:
  torch::Tensor sum_;
  int64_t count_ = 0;
};

struct EvalReport {
  double loss = 0;
  double kappa = 0;  // quadratic weighted kappa
};

struct Referral {
  int64_t index;
  bool gradable;
  double p_referable;
};

// common.cpp
FundusBatch synth_fundus(int64_t n, uint64_t seed, torch::Device device, double red_gain = 1.0);
torch::Tensor grading_loss(const torch::Tensor &logits, const torch::Tensor &grades);
torch::Tensor quality_loss(const torch::Tensor &logit, const torch::Tensor &gradable);
torch::Tensor accum_share(const torch::Tensor &loss, int64_t accum);
double quadratic_kappa(const torch::Tensor &confusion);
void require_finite(const torch::Tensor &t, const char *what);

// model.cpp
void set_backbone_trainable(GraderNet &net, bool trainable);
void freeze_for_screening(GraderNet &net, QualityNet &gate);
EvalReport evaluate(GraderNet &net, const RunConfig &cfg, torch::Device device);
std::vector<Referral> screen_batch(GraderNet &net, QualityNet &gate, const torch::Tensor &images);
double quality_pass_rate(QualityNet &gate, const torch::Tensor &images);

// step.cpp
torch::Tensor probe_step(GraderNet &net, torch::optim::SGD &opt, const FundusBatch &batch);
torch::Tensor grader_micro_step(GraderNet &net, const FundusBatch &batch, int64_t accum);
torch::Tensor quality_step(QualityNet &gate, torch::optim::Adam &opt, const FundusBatch &batch);
torch::Tensor site_step(GraderNet &net, const FundusBatch &batch);
bool step_when_ready(torch::optim::Optimizer &opt, int64_t micro, int64_t accum);
