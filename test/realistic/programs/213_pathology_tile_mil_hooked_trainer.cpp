// Slide-level metastasis detection for lymph-node whole-slide images with
// gated attention MIL (Ilse et al.): every slide is a bag of tissue tiles,
// each tile is described by a frozen tile encoder, and an attention pooling
// over the tiles gives one prediction per slide. One slide fits in memory at
// a time, so the trainer accumulates gradients over several slides; how the
// gradients are cleared is a std::function member so the multi-site study can
// swap in its own. A short float16 fine-tune adapts the model to the scanner
// of a second hospital.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kRaw = 384, kFeat = 128, kHidden = 64;

struct AttentionMilImpl : torch::nn::Module {
  AttentionMilImpl()
      : embed(register_module("embed", torch::nn::Sequential(torch::nn::Linear(kFeat, kHidden), torch::nn::ReLU(),
                                                             torch::nn::Dropout(0.25)))),
        att_v(register_module("att_v", torch::nn::Linear(kHidden, 32))),
        att_u(register_module("att_u", torch::nn::Linear(kHidden, 32))),
        att_w(register_module("att_w", torch::nn::Linear(32, 1))),
        classifier(register_module("classifier", torch::nn::Linear(kHidden, 2))) {}

  // [N tiles, kFeat] -> attention over the tiles [N]
  torch::Tensor attention_weights(const torch::Tensor& h) {
    auto gate = torch::tanh(att_v(h)) * torch::sigmoid(att_u(h));
    return torch::softmax(att_w(gate).squeeze(1), 0);
  }

  // [N tiles, kFeat] -> slide logits [1, 2]
  torch::Tensor forward(const torch::Tensor& tiles) {
    auto h = embed->forward(tiles);
    auto a = attention_weights(h);
    return classifier((a.unsqueeze(1) * h).sum(0, /*keepdim=*/true));
  }

  torch::nn::Sequential embed;
  torch::nn::Linear att_v, att_u, att_w, classifier;
};
TORCH_MODULE(AttentionMil);

struct Slide {
  torch::Tensor raw;    // [N, kRaw] tile descriptors from the scanner pipeline
  torch::Tensor tiles;  // [N, kFeat] after the tile encoder
  torch::Tensor label;  // [1], 1 = metastasis
};

std::vector<Slide> synth_slides(int64_t n, torch::Device device) {
  std::vector<Slide> out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t tiles = 40 + (i * 37) % 160;
    const int64_t label = i % 3 == 0 ? 1 : 0;
    auto raw = torch::randn({tiles, kRaw}, device);
    if (label == 1)
      raw.slice(0, 0, tiles / 10).add_(1.5);  // a small tumour region
    out.push_back({raw, torch::Tensor(), torch::full({1}, label, torch::TensorOptions(torch::kLong).device(device))});
  }
  return out;
}

void check_bag(const torch::Tensor& tiles) {
  if (tiles.size(0) == 0)
    throw std::runtime_error("slide has no tissue tiles");
}

class MilTrainer {
 public:
  MilTrainer(AttentionMil model, int64_t slides_per_step, double lr)
      : model_(model),
        opt_(model->parameters(), torch::optim::AdamOptions(lr).weight_decay(1e-4)),
        slides_per_step_(slides_per_step),
        clear_([](torch::optim::Optimizer& o) { o.zero_grad(); }) {}

  void run_epoch(const std::vector<Slide>& train, const std::vector<Slide>& val, size_t check_every) {
    model_->train();
    auto validate = [&] {
      model_->eval();
      torch::NoGradGuard no_grad;
      int64_t correct = 0;
      for (const auto& s : val)
        // OK(torch-eval-mode-missing): the lambda switches to eval() first.
        correct += model_->forward(s.tiles).argmax(1).eq(s.label).sum().item<int64_t>();
      model_->train();
      return static_cast<double>(correct) / static_cast<double>(val.size());
    };
    for (size_t i = 0; i < train.size(); ++i) {
      // OK(torch-eval-mode-missing): validate() puts the model back in training mode.
      auto loss = F::cross_entropy(model_->forward(train[i].tiles), train[i].label);
      // BUG(torch-grad-accumulation-unscaled): slides_per_step_ mean losses
      // are summed into one update without dividing by slides_per_step_.
      loss.backward();
      if (++slides_in_step_ == slides_per_step_) {
        // OK(torch-missing-zero-grad): clear_ zeroes the gradients right after.
        opt_.step();
        clear_(opt_);
        slides_in_step_ = 0;
      }
      if ((i + 1) % check_every == 0)
        std::cout << "slide " << i + 1 << " val accuracy " << validate() << '\n';
    }
  }

 private:
  AttentionMil model_;
  torch::optim::Adam opt_;
  int64_t slides_per_step_;
  int64_t slides_in_step_ = 0;
  std::function<void(torch::optim::Optimizer&)> clear_;
};

torch::Tensor bag_loss(AttentionMil& model, const Slide& s) {
  return F::cross_entropy(model->forward(s.tiles), s.label);
}

// Adapts to the second hospital's scanner under CUDA autocast.
void finetune_site(AttentionMil& model, const std::vector<Slide>& site) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-4).momentum(0.9));
  model->train();
  for (const auto& s : site) {
    opt.zero_grad();
    at::autocast::set_enabled(true);
    auto loss = bag_loss(model, s);
    at::autocast::set_enabled(false);
    // BUG(torch-autocast-region): the loss comes from a float16 region and
    // reaches backward() unscaled; small attention gradients underflow.
    loss.backward();
    opt.step();
  }
}

// Probability of metastasis for one slide.
torch::Tensor slide_probability(AttentionMil& model, const torch::Tensor& tiles) {
  torch::NoGradGuard no_grad;
  // BUG(torch-autocast-region): check_bag() throws on a slide without
  // tissue, leaving autocast switched on for the caller's thread.
  at::autocast::set_enabled(true);
  check_bag(tiles);
  // BUG(torch-eval-mode-missing): score_cohort() is called right after
  // training, with the embedding Dropout still active.
  auto logits = model->forward(tiles);
  at::autocast::set_enabled(false);
  return torch::softmax(logits.to(torch::kFloat), 1).select(1, 1);
}

std::vector<double> score_cohort(AttentionMil& model, const std::vector<Slide>& cohort) {
  std::vector<double> probs;
  for (const auto& s : cohort)
    probs.push_back(slide_probability(model, s.tiles).item<double>());
  return probs;
}

// Attention of every tile, for the pathologist's review overlay.
std::vector<float> attention_overlay(AttentionMil& model, const Slide& s) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto weights = model->attention_weights(model->embed->forward(s.tiles)).contiguous();
  // BUG(torch-tensor-to-discarded): the copy to the host is thrown away;
  // data_ptr() below then reads device memory on a GPU run.
  weights.cpu();
  return std::vector<float>(weights.data_ptr<float>(), weights.data_ptr<float>() + weights.numel());
}

int main() {
  torch::manual_seed(213);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  auto train = synth_slides(240, device);
  auto val = synth_slides(30, device);
  auto site_b = synth_slides(40, device);

  // Frozen tile encoder (pretrained elsewhere): Linear and ReLU only.
  torch::nn::Sequential tile_encoder(torch::nn::Linear(kRaw, 256), torch::nn::ReLU(), torch::nn::Linear(256, kFeat));
  tile_encoder->to(device);
  {
    torch::NoGradGuard no_grad;
    for (auto* split : {&train, &val, &site_b})
      for (auto& s : *split)
        // OK(torch-eval-mode-missing): no Dropout or BatchNorm in the encoder.
        s.tiles = tile_encoder->forward(s.raw);
  }

  AttentionMil model;
  model->to(device);
  MilTrainer trainer(model, 8, 2e-4);
  for (int epoch = 0; epoch < 5; ++epoch)
    trainer.run_epoch(train, val, 60);

  auto probs = score_cohort(model, val);
  std::cout << "first slide p(metastasis) " << probs.front() << '\n';
  finetune_site(model, site_b);
  auto overlay = attention_overlay(model, val.front());
  std::cout << "overlay tiles " << overlay.size() << '\n';
}
