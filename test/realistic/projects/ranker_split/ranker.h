// A learning-to-rank model split over three files: features.cpp builds the
// query/document features and holds the small tensor helpers, train.cpp has
// the pairwise training loop and the scoring passes, main.cpp chooses the
// device and runs the experiment.
#pragma once

#include <torch/torch.h>

#include <cstdint>

constexpr int64_t kFeat = 48;

struct ScorerImpl : torch::nn::Module {
  ScorerImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kFeat, 96))),
        fc2(register_module("fc2", torch::nn::Linear(96, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))).squeeze(-1); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Scorer);

struct RunStats {
  torch::Tensor loss_sum;
  int64_t steps = 0;
};

// features.cpp
torch::Tensor host_features(int64_t n);
torch::Tensor pinned_features(int64_t n);
torch::Tensor relevance_labels(int64_t n);
torch::Tensor upload(const torch::Tensor &host, torch::Device device);
torch::Tensor to_host_async(const torch::Tensor &t);
torch::Tensor pairwise_loss(const torch::Tensor &scores, const torch::Tensor &labels);
void accumulate(RunStats &stats, const torch::Tensor &loss);
void log_every(int64_t step, int64_t every, const torch::Tensor &loss);
torch::Tensor gpu_score_histogram(const torch::Tensor &scores);

// train.cpp
void fit(Scorer &model, torch::Device device, int64_t steps);
double evaluate(Scorer &model, torch::Device device, int64_t batches);
void score_candidates(Scorer &model, torch::Device device, int64_t pages);
