// Seizure detection on 19-channel scalp EEG (10-20 montage, 2 s segments at
// 128 Hz). Each brain region has its own convolutional encoder, kept in a
// torch::nn::ModuleDict keyed by region; a dropout classifier reads their
// pooled features. Training keeps an EMA shadow of the network, validates
// both every `eval_every` steps from inside the step loop, checkpoints the
// shadow when it improves, and stops after `patience` evaluations without
// improvement. The released shadow is then fine-tuned per patient.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

constexpr int64_t kChannels = 19, kSamples = 256;

// Channel ranges of the montage, by region.
const std::map<std::string, std::pair<int64_t, int64_t>> kRegions = {
    {"frontal", {0, 7}}, {"temporal", {7, 13}}, {"posterior", {13, 19}}};

struct SeizureNetImpl : torch::nn::Cloneable<SeizureNetImpl> {
  SeizureNetImpl() { reset(); }
  void reset() override {
    groups = register_module("groups", torch::nn::ModuleDict());
    for (const auto &[name, range] : kRegions) {
      auto width = range.second - range.first;
      groups->update({{name, torch::nn::Sequential(torch::nn::Conv1d(torch::nn::Conv1dOptions(width, 32, 7).stride(2)),
                                                   torch::nn::BatchNorm1d(32), torch::nn::ReLU(),
                                                   torch::nn::AdaptiveAvgPool1d(1), torch::nn::Flatten())
                                  .ptr()}});
    }
    head = register_module("head", torch::nn::Sequential(torch::nn::Linear(32 * 3, 64), torch::nn::ReLU(),
                                                         torch::nn::Dropout(0.3), torch::nn::Linear(64, 1)));
  }
  torch::Tensor forward(const torch::Tensor &eeg) {
    std::vector<torch::Tensor> feats;
    for (const auto &[name, encoder] : groups->items()) {
      const auto &range = kRegions.at(name);
      feats.push_back(encoder->as<torch::nn::Sequential>()->forward(eeg.slice(1, range.first, range.second)));
    }
    return head->forward(torch::cat(feats, 1)).squeeze(1);
  }
  torch::nn::ModuleDict groups{nullptr};
  torch::nn::Sequential head{nullptr};
};
TORCH_MODULE(SeizureNet);

struct Segments {
  torch::Tensor eeg, ictal;
};

// Seizure segments carry a 3-5 Hz rhythmic discharge on the temporal channels.
Segments draw_segments(int64_t n, double seizure_rate, torch::Device device) {
  auto ictal = (torch::rand({n}, device) < seizure_rate).to(torch::kFloat);
  auto t = torch::arange(kSamples, torch::TensorOptions().device(device)) / 128.0;
  auto eeg = torch::randn({n, kChannels, kSamples}, device);
  eeg.slice(1, 7, 13).add_(2.0 * torch::sin(2 * M_PI * 4.0 * t) * ictal.view({n, 1, 1}));
  return {eeg, ictal};
}

struct FitConfig {
  int max_steps = 3000, eval_every = 200, patience = 4;
  double lr = 1e-3, ema_decay = 0.999, pos_weight = 8.0;
};

// Balanced accuracy at threshold 0.5; the caller sets the module's mode.
double balanced_accuracy(SeizureNet &net, const std::vector<Segments> &set) {
  torch::NoGradGuard no_grad;
  double tp = 0, tn = 0, pos = 0, neg = 0;
  for (const auto &s : set) {
    // OK(torch-eval-mode-missing): both callers switch (or keep) the module in eval mode.
    auto pred = (net->forward(s.eeg) > 0).to(torch::kFloat);
    tp += (pred * s.ictal).sum().item<double>();
    tn += ((1 - pred) * (1 - s.ictal)).sum().item<double>();
    pos += s.ictal.sum().item<double>();
    neg += (1 - s.ictal).sum().item<double>();
  }
  return 0.5 * (tp / std::max(pos, 1.0) + tn / std::max(neg, 1.0));
}

SeizureNet fit(const FitConfig &cfg, const std::vector<Segments> &valid, torch::Device device) {
  SeizureNet model;
  model->to(device);
  SeizureNet shadow = std::dynamic_pointer_cast<SeizureNetImpl>(model->clone());
  shadow->eval();
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(1e-2));
  auto pos_weight = torch::full({1}, cfg.pos_weight, device);

  // Quick look at the training loss on a fixed batch, for the log.
  auto probe = draw_segments(256, 0.2, device);
  auto probe_loss = [&] {
    torch::NoGradGuard no_grad;
    // BUG(torch-eval-mode-missing): called from the step loop with the model
    // in training mode: the logged loss has dropout and batch statistics.
    auto logits = model->forward(probe.eeg);
    return torch::binary_cross_entropy_with_logits(logits, probe.ictal, {}, pos_weight).item<double>();
  };

  model->train();
  opt.zero_grad();
  double best = 0.0;
  int bad_evals = 0;
  for (int step = 1; step <= cfg.max_steps; ++step) {
    auto batch = draw_segments(64, 0.2, device);
    auto loss = torch::binary_cross_entropy_with_logits(model->forward(batch.eeg), batch.ictal, {}, pos_weight);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    // BUG(torch-missing-zero-grad): the `continue` of an evaluation that did
    // not improve skips the zero_grad() at the bottom of the loop.
    opt.step();
    {
      torch::NoGradGuard no_grad;
      auto src = model->parameters();
      auto dst = shadow->parameters();
      for (size_t i = 0; i < src.size(); ++i)
        dst[i].lerp_(src[i], 1.0 - cfg.ema_decay);
      auto src_buf = model->buffers();
      auto dst_buf = shadow->buffers();
      for (size_t i = 0; i < src_buf.size(); ++i)
        dst_buf[i].copy_(src_buf[i]);
    }

    if (step % cfg.eval_every == 0) {
      std::cout << "step " << step << " probe loss " << probe_loss();
      model->eval();
      double live = balanced_accuracy(model, valid);
      model->train();
      double ema = balanced_accuracy(shadow, valid);
      std::cout << "  live " << live << "  shadow " << ema << '\n';
      if (ema <= best) {
        if (++bad_evals >= cfg.patience)
          break;
        continue;
      }
      best = ema;
      bad_evals = 0;
      torch::save(shadow, "seizure_shadow_best.pt");
    }
    opt.zero_grad();
  }
  return shadow;
}

// Adapts a copy of the released detector to one patient's annotated seizures.
SeizureNet fine_tune_patient(const SeizureNet &released, const std::vector<Segments> &patient, int epochs) {
  SeizureNet net = std::dynamic_pointer_cast<SeizureNetImpl>(released->clone());
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(1e-4).momentum(0.9));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (const auto &s : patient) {
      opt.zero_grad();
      // BUG(torch-eval-mode-missing): the clone keeps the released model's
      // eval mode and nothing calls train(): BatchNorm stays frozen.
      auto logits = net->forward(s.eeg);
      torch::binary_cross_entropy_with_logits(logits, s.ictal).backward();
      opt.step();
    }
  }
  return net;
}

int main() {
  torch::manual_seed(198);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  std::vector<Segments> valid;
  for (int i = 0; i < 8; ++i)
    valid.push_back(draw_segments(128, 0.1, device));

  FitConfig cfg;
  SeizureNet released = fit(cfg, valid, device);
  std::vector<Segments> patient;
  for (int i = 0; i < 6; ++i)
    patient.push_back(draw_segments(32, 0.5, device));
  SeizureNet personal = fine_tune_patient(released, patient, 3);
  personal->eval();
  std::cout << "patient-specific balanced accuracy " << balanced_accuracy(personal, patient) << '\n';
  return 0;
}
