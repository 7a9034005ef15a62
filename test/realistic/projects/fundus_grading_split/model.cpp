// The grading network, the quality gate, their modes, and their evaluation
// and screening.
#include "amp.h"
#include "fundus.h"

namespace {

// Two 3x3 convolutions with batch norm, then a 2x downsampling.
void add_stage(torch::nn::Sequential &seq, int64_t in, int64_t out) {
  seq->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
  seq->push_back(torch::nn::BatchNorm2d(out));
  seq->push_back(torch::nn::ReLU());
  seq->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)));
  seq->push_back(torch::nn::BatchNorm2d(out));
  seq->push_back(torch::nn::ReLU());
  seq->push_back(torch::nn::MaxPool2d(2));
}

}  // namespace

GraderNetImpl::GraderNetImpl(int64_t width) {
  torch::nn::Sequential stages;
  add_stage(stages, 3, width);
  add_stage(stages, width, 2 * width);
  add_stage(stages, 2 * width, 4 * width);
  backbone = register_module("backbone", stages);
  drop = register_module("drop", torch::nn::Dropout(0.3));
  head = register_module("head", torch::nn::Linear(4 * width, kGrades));
}

torch::Tensor GraderNetImpl::forward(torch::Tensor images) {
  auto pooled = backbone->forward(images).mean({2, 3});
  return head->forward(drop->forward(pooled));
}

QualityNetImpl::QualityNetImpl() {
  body = register_module(
      "body", torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 5).stride(2).padding(2)),
                                    torch::nn::BatchNorm2d(8), torch::nn::ReLU(),
                                    torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 16, 5).stride(2).padding(2)),
                                    torch::nn::BatchNorm2d(16), torch::nn::ReLU(), torch::nn::AdaptiveAvgPool2d(1),
                                    torch::nn::Flatten(), torch::nn::Linear(16, 1)));
}

torch::Tensor QualityNetImpl::forward(torch::Tensor images) { return body->forward(images); }

void set_backbone_trainable(GraderNet &net, bool trainable) {
  for (auto &p : net->backbone->parameters())
    p.set_requires_grad(trainable);
}

void freeze_for_screening(GraderNet &net, QualityNet &gate) {
  net->eval();
  gate->eval();
}

// Validation loss and quadratic weighted kappa on held-out photographs.
EvalReport evaluate(GraderNet &net, const RunConfig &cfg, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto confusion = torch::zeros({kGrades, kGrades}, torch::kLong);
  double loss_sum = 0;
  for (int64_t b = 0; b < cfg.val_batches; ++b) {
    auto batch = synth_fundus(cfg.batch, kValSeed + static_cast<uint64_t>(b), device);
    // BUG(torch-eval-mode-missing): fit() (train.cpp) calls evaluate() right
    // after finetune_epoch(); nothing calls eval(), so the Dropout and the
    // BatchNorm layers of GraderNet's constructor run in training mode.
    auto logits = net->forward(batch.images);
    // OK(torch-loss-accumulation-graph): a host double, under the guard.
    loss_sum += grading_loss(logits, batch.grades).item<double>();
    auto cell = (batch.grades * kGrades + logits.argmax(1)).cpu();
    confusion += torch::bincount(cell, {}, kGrades * kGrades).view({kGrades, kGrades});
  }
  return {loss_sum / static_cast<double>(cfg.val_batches), quadratic_kappa(confusion)};
}

// One clinic's photographs: which are gradable, and the probability of a
// referable grade (moderate or worse).
std::vector<Referral> screen_batch(GraderNet &net, QualityNet &gate, const torch::Tensor &images) {
  torch::NoGradGuard no_grad;
  // BUG(torch-autocast-region): require_finite() (common.cpp) throws on a
  // NaN output and main() carries on with the next clinic, with CUDA
  // autocast still on for the thread; the switch-off below never runs.
  FUNDUS_CUDA_AUTOCAST(true);
  // OK(torch-eval-mode-missing): main() calls freeze_for_screening() first.
  auto gradable = torch::sigmoid(gate->forward(images)).squeeze(1) > 0.5;
  auto probs = torch::softmax(net->forward(images).to(torch::kFloat), 1);
  require_finite(probs, "grader");
  FUNDUS_CUDA_AUTOCAST(false);

  auto referable = probs.narrow(1, 2, kGrades - 2).sum(1).cpu();
  auto ok = gradable.cpu();
  std::vector<Referral> out;
  for (int64_t i = 0; i < images.size(0); ++i)
    out.push_back({i, ok[i].item<bool>(), referable[i].item<double>()});
  return out;
}

double quality_pass_rate(QualityNet &gate, const torch::Tensor &images) {
  torch::NoGradGuard no_grad;
  // OK(torch-autocast-region): the scope restores autocast when
  // require_finite() throws.
  AutocastScope amp(at::kHalf);
  auto p = torch::sigmoid(gate->forward(images).to(torch::kFloat));
  require_finite(p, "quality gate");
  return (p > 0.5).to(torch::kFloat).mean().item<double>();
}
