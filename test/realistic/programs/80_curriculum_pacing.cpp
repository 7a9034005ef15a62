// Curriculum learning for a noisy-label image classifier. A scoring pass
// ranks the pool by the current model's per-sample loss (easy first); a
// pacing function widens the slice of the ranked pool the sampler may draw
// from as the model's competence grows. The sampler is a class template over
// its scoring callable, which main() writes as a lambda; the phase of the
// schedule is an enum handled with a switch.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <utility>
#include <vector>

constexpr int64_t kClasses = 10;

enum class Phase { Warmup, Pacing, Full };

struct SmallCnnImpl : torch::nn::Module {
  SmallCnnImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5)))),
        fc(register_module("fc", torch::nn::Linear(32 * 4 * 4, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    return fc->forward(x.flatten(1));
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc;
};
TORCH_MODULE(SmallCnn);

template <typename ScoreFn>
class CurriculumSampler {
 public:
  CurriculumSampler(torch::Tensor x, torch::Tensor y, ScoreFn score)
      : x_(std::move(x)), y_(std::move(y)), score_(std::move(score)) {}

  // Re-ranks the pool by difficulty (ascending per-sample loss).
  void rescore() {
    auto s = score_(x_, y_);
    // BUG(torch-device-mismatch): the tie-breaking jitter is drawn on the
    // host, the scores come from the model's device.
    auto jittered = s + torch::rand({x_.size(0)}) * 1e-6;
    order_ = jittered.argsort().cpu();
    // BUG(torch-tensor-to-discarded): the contiguous copy is thrown away.
    order_.contiguous();
  }

  std::pair<torch::Tensor, torch::Tensor> draw(Phase phase, double competence, int64_t bs) {
    int64_t limit = x_.size(0);
    switch (phase) {
      case Phase::Warmup:
        limit = x_.size(0) / 10;
        break;
      case Phase::Pacing:
        limit = std::max<int64_t>(bs, static_cast<int64_t>(competence * static_cast<double>(x_.size(0))));
        break;
      case Phase::Full:
        break;
    }
    auto pick = order_.slice(0, 0, limit).index_select(0, torch::randint(0, limit, {bs}, torch::kLong));
    return {x_.index_select(0, pick), y_.index_select(0, pick)};
  }

 private:
  torch::Tensor x_, y_;
  ScoreFn score_;
  torch::Tensor order_;
};

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  SmallCnn model;
  model->to(device);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto pool_x = torch::randn({20000, 1, 28, 28});
  auto pool_y = torch::randint(0, kClasses, {20000}, torch::kLong);

  auto per_sample_loss = [&](const torch::Tensor &x, const torch::Tensor &y) {
    std::vector<torch::Tensor> parts;
    for (int64_t b = 0; b < x.size(0); b += 1024) {
      auto xb = x.slice(0, b, b + 1024).to(device);
      auto yb = y.slice(0, b, b + 1024).to(device);
      // BUG(torch-inference-without-no-grad): ranking the pool is a pure
      // evaluation pass, but autograd records every chunk.
      auto logits = model->forward(xb);
      // OK(torch-loss-accumulation-graph): the parts are returned (no backward
      // in this loop).
      parts.push_back(torch::nn::functional::cross_entropy(
          logits, yb, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone)));
    }
    return torch::cat(parts);
  };
  CurriculumSampler<decltype(per_sample_loss)> sampler(pool_x, pool_y, per_sample_loss);

  // Logit adjustment per phase (Menon et al.): a log-prior added to the
  // logits, stronger while the sampler still favours easy classes.
  std::map<Phase, torch::Tensor> logit_adjust;
  logit_adjust.emplace(Phase::Warmup, torch::zeros({1, kClasses}));
  logit_adjust.emplace(Phase::Pacing, torch::log(torch::full({1, kClasses}, 1.0 / kClasses)) * 0.5);
  logit_adjust.emplace(Phase::Full, torch::zeros({1, kClasses}));

  double competence = 0.1;
  const int64_t bs = 128;
  for (int64_t step = 0; step < 6000; ++step) {
    Phase phase = step < 500 ? Phase::Warmup : (competence < 1.0 ? Phase::Pacing : Phase::Full);
    if (step % 1000 == 0)
      sampler.rescore();
    auto [xb, yb] = sampler.draw(phase, competence, bs);
    auto x = xb.to(device), y = yb.to(device);
    opt.zero_grad();
    // OK(torch-device-mismatch): the drawn batch was moved to the device.
    auto logits = model->forward(x);
    // BUG(torch-device-mismatch): the adjustments in the map were built on the
    // host; the logits are on the device.
    auto loss = torch::nn::functional::cross_entropy(logits + logit_adjust.at(phase), y);
    loss.backward();
    opt.step();
    switch (phase) {
      case Phase::Warmup:
        break;
      case Phase::Pacing: {
        // OK(torch-host-sync-in-loop): read only in the pacing phase, under a
        // switch case.
        const double l = loss.item<double>();
        competence = std::min(1.0, competence + 1e-3 * std::exp(-l));
        break;
      }
      case Phase::Full:
        break;
    }
    // BUG(torch-host-sync-in-loop): the batch accuracy is read on the host
    // every step for the progress bar.
    const float acc = logits.argmax(1).eq(y).to(torch::kFloat).mean().item<float>();
    if (step % 200 == 0)
      std::cout << "step " << step << " competence " << competence << " acc " << acc << "\n";
  }
  return 0;
}
