// REQUIRES: check-torch-eval-mode-missing
// EvaluationFunctions: every forward in the project's evaluation functions
// evaluates, whatever guard or loop surrounds it.
// RUN: %check_torch_tidy %s torch-eval-mode-missing %t
// RUN: %check_torch_tidy -check-suffix=EVAL %s torch-eval-mode-missing %t \
// RUN:   -- --config="{CheckOptions: {torch-eval-mode-missing.EvaluationFunctions: 'metrics::score'}}"

#include <torch/torch.h>

struct TaggerImpl : torch::nn::Module {
  TaggerImpl() {
    fc = register_module("fc", torch::nn::Linear(8, 4));
    drop = register_module("drop", torch::nn::Dropout(0.1));
  }
  torch::Tensor forward(torch::Tensor x) { return fc(drop(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Tagger);

torch::Tensor batch();

namespace metrics {
// Scores one batch; its callers hold no guard and run no loop.
double score(Tagger &tagger) {
  auto logits = tagger->forward(batch());
  // CHECK-MESSAGES-EVAL: :[[@LINE-1]]:17: warning: module 'tagger' is evaluated in training mode
  return logits.argmax(1).sum().item<double>();
}
} // namespace metrics

double report_once() {
  Tagger tagger;
  return metrics::score(tagger);
}
