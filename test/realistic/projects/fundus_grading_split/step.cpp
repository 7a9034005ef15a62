// One optimisation step (or micro-step) of each training phase; the loops
// that run them are in train.cpp.
#include "amp.h"
#include "fundus.h"

// Phase 1: the linear probe. The backbone is frozen, so only the head's
// gradients are computed; the caller decides about mixed precision.
torch::Tensor probe_step(GraderNet &net, torch::optim::SGD &opt, const FundusBatch &batch) {
  auto logits = net->forward(batch.images);
  auto loss = grading_loss(logits, batch.grades);
  // BUG(torch-autocast-region): warm_up_head() (train.cpp) runs every probe
  // step with CUDA autocast switched on by amp::enable() (common.cpp); this
  // backward() runs inside the region.
  loss.backward();
  // BUG(torch-missing-zero-grad): neither this step nor warm_up_head()
  // resets the head's gradients, so each SGD step applies the sum of all
  // the probe's gradients so far.
  opt.step();
  return loss;
}

// Phase 2: one micro-batch of the fine-tuning. The forward runs in
// bfloat16; the caller steps every `accum` micro-batches. Returns the
// micro-batch's (undivided) loss for the logs.
torch::Tensor grader_micro_step(GraderNet &net, const FundusBatch &batch, int64_t accum) {
  torch::Tensor loss;
  {
    // OK(torch-autocast-region): bfloat16, and the scope closes before
    // the backward().
    AutocastScope amp(at::kBFloat16);
    loss = grading_loss(net->forward(batch.images), batch.grades);
  }
  // OK(torch-grad-accumulation-unscaled, torch-autocast-region):
  // accum_share() (common.cpp) divides the mean loss by the accumulation.
  accum_share(loss, accum).backward();
  return loss;
}

// Phase 3: one step of the quality gate, in float16 on GPU runs (the gate is
// small and the photographs are large).
torch::Tensor quality_step(QualityNet &gate, torch::optim::Adam &opt, const FundusBatch &batch) {
  opt.zero_grad();
  torch::Tensor loss;
  {
    AutocastScope amp(at::kHalf);
    loss = quality_loss(gate->forward(batch.images), batch.gradable);
  }
  // BUG(torch-autocast-region): the loss comes from a float16 region
  // (AutocastScope, common.cpp) and reaches backward() without a loss
  // scale; the gate's small gradients underflow to zero.
  loss.backward();
  // OK(torch-missing-zero-grad): reset at the top of every step.
  opt.step();
  return loss.detach();
}

// Phase 4: one small micro-batch from the new clinic's camera; the caller
// updates through step_when_ready().
torch::Tensor site_step(GraderNet &net, const FundusBatch &batch) {
  auto loss = grading_loss(net->forward(batch.images), batch.grades);
  // BUG(torch-grad-accumulation-unscaled): adapt_to_site() (train.cpp)
  // steps only once per cfg.site_accum micro-batches, through
  // step_when_ready(); this mean loss is never divided, so each update is
  // site_accum times the mean gradient.
  loss.backward();
  return loss.detach();
}

// Steps and resets once every `accum` micro-batches; true when it stepped.
bool step_when_ready(torch::optim::Optimizer &opt, int64_t micro, int64_t accum) {
  if (micro % accum != 0)
    return false;
  // OK(torch-missing-zero-grad): reset under the same condition.
  opt.step();
  opt.zero_grad();
  return true;
}
