// RUN: %check_torch_tidy %s torch-eval-mode-missing %t
//
// Modes that a value decides: `train(on)` with a flag the callers pass (a
// bool, or an enum compared with a constant, through helpers), a mode saved
// with is_training() and restored with train(was); a module's own method
// that runs its layers (`model->decode(z)`, or its own forward), judged at
// its call; a handle copied from a getter names the same module; a mode
// switched on layers reached through children() may be any module's; a
// branch (an if, a switch) on a value the path knows takes one way, and a
// constant passed for a parameter a helper branches on picks its branch.

#include <torch/torch.h>

struct TaggerImpl : torch::nn::Module {
  TaggerImpl() {
    fc = register_module("fc", torch::nn::Linear(8, 4));
    drop = register_module("drop", torch::nn::Dropout(0.3));
  }
  torch::Tensor forward(torch::Tensor x) { return fc(drop(x)); }
  // Greedy decoding: runs the layers without forward().
  torch::Tensor decode(torch::Tensor x) {
    auto h = drop(x);
    for (int t = 0; t < 4; ++t)
      h = fc(drop(h));
    return h.argmax(-1);
  }
  // Runs the module's own forward.
  torch::Tensor score(torch::Tensor x) { return forward(x).sum(-1); }
  // Reads a weight: runs no layer.
  torch::Tensor head_norm() { return fc->weight.sum(); }
  torch::nn::Linear fc{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Tagger);

torch::Tensor batch();

enum class Phase { Fit, Validate };

void set_training(torch::nn::Module &m, bool on) { m.train(on); }
void set_phase(torch::nn::Module &m, Phase p) { m.train(p == Phase::Fit); }
void enter(Tagger &net, Phase p) { set_phase(*net, p); }

double score(Tagger &net) {
  torch::NoGradGuard no_grad;
  return net->forward(batch()).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

void flag_true_then_scored() {
  Tagger net;
  set_training(*net, false);
  score(net);
  set_training(*net, true);
  score(net);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: note: called here
}

double validate(Tagger &net) {
  torch::NoGradGuard no_grad;
  return net->forward(batch()).mean().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

void phase_through_two_helpers() {
  Tagger net;
  enter(net, Phase::Validate);
  validate(net);
  enter(net, Phase::Fit);
  validate(net);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: note: called here
}

// A flag no call makes known: unknown, silent.
void phase_from_config(Tagger &net, int raw) {
  set_phase(*net, static_cast<Phase>(raw));
  torch::NoGradGuard no_grad;
  net->forward(batch());
}

// Saved and restored: the mode it was in, not training.
void probe_and_restore(Tagger &net) {
  bool was_training = net->is_training();
  net->eval();
  {
    torch::NoGradGuard no_grad;
    net->forward(batch());
  }
  net->train(was_training);
}

void restored_eval_mode_stays() {
  Tagger net;
  net->eval();
  probe_and_restore(net);
  torch::NoGradGuard no_grad;
  net->forward(batch());
}

void restored_train_mode_stays() {
  Tagger net;
  probe_and_restore(net);
  torch::NoGradGuard no_grad;
  net->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

// The module's own decode() runs its Dropout: one finding, at the call.
void decode_in_training_mode() {
  Tagger net;
  torch::NoGradGuard no_grad;
  net->decode(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

void decode_in_eval_mode() {
  Tagger net;
  net->eval();
  torch::NoGradGuard no_grad;
  net->decode(batch());
}

// A method that runs no layer is no forward.
void norm_in_training_mode() {
  Tagger net;
  torch::NoGradGuard no_grad;
  net->head_norm();
}

void score_in_training_mode() {
  Tagger net;
  torch::NoGradGuard no_grad;
  net->score(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

class Holder {
public:
  Tagger &model() { return model_; }

private:
  Tagger model_;
};

// `deployed` and `holder.model()` are one module.
void alias_from_getter() {
  Holder holder;
  Tagger deployed = holder.model();
  deployed->eval();
  torch::NoGradGuard no_grad;
  holder.model()->forward(batch());
}

// Every layer switched one by one: which module's layers is not followed.
void layers_switched_one_by_one() {
  Tagger net;
  for (auto &layer : net->children())
    layer->eval();
  torch::NoGradGuard no_grad;
  net->forward(batch());
}

// A scope object saves the mode in a member and its destructor restores it.
class ModeScope {
public:
  ModeScope(torch::nn::Module &m, bool training) : m_(m), saved_(m.is_training()) {
    m_.train(training);
  }
  ~ModeScope() { m_.train(saved_); }

private:
  torch::nn::Module &m_;
  bool saved_;
};

class SharedEvalScope {
public:
  explicit SharedEvalScope(std::shared_ptr<torch::nn::Module> m)
      : m_(std::move(m)), was_training_(m_->is_training()) {
    m_->eval();
  }
  ~SharedEvalScope() { m_->train(was_training_); }

private:
  std::shared_ptr<torch::nn::Module> m_;
  bool was_training_;
};

void restored_by_scope_destructor() {
  Tagger net;
  net->train();
  {
    ModeScope scope(*net, /*training=*/false);
    torch::NoGradGuard no_grad;
    net->forward(batch());
  }
  torch::NoGradGuard no_grad;
  net->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

void restored_eval_by_scope_destructor() {
  Tagger net;
  net->eval();
  {
    ModeScope scope(*net, /*training=*/true);
  }
  torch::NoGradGuard no_grad;
  net->forward(batch());
}

void restored_by_shared_scope_destructor() {
  Tagger net;
  {
    SharedEvalScope scope(net.ptr());
    torch::NoGradGuard no_grad;
    net->forward(batch());
  }
  torch::NoGradGuard no_grad;
  net->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

// The layers a helper builds and the constructor registers.
namespace {
torch::nn::Sequential dropout_block(int64_t n) {
  return torch::nn::Sequential(torch::nn::Linear(n, n), torch::nn::Dropout(0.1));
}
torch::nn::Sequential plain_block(int64_t n) {
  return torch::nn::Sequential(torch::nn::Linear(n, n), torch::nn::ReLU());
}
} // namespace

struct BlockNetImpl : torch::nn::Module {
  BlockNetImpl();
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Sequential body{nullptr};
};
TORCH_MODULE(BlockNet);
BlockNetImpl::BlockNetImpl() { body = register_module("body", dropout_block(4)); }
torch::Tensor BlockNetImpl::forward(torch::Tensor x) { return body->forward(x); }

struct PlainNetImpl : torch::nn::Module {
  PlainNetImpl();
  torch::Tensor forward(torch::Tensor x);
  torch::nn::Sequential body{nullptr};
};
TORCH_MODULE(PlainNet);
PlainNetImpl::PlainNetImpl() { body = register_module("body", plain_block(4)); }
torch::Tensor PlainNetImpl::forward(torch::Tensor x) { return body->forward(x); }

void layers_from_a_helper() {
  BlockNet net;
  torch::NoGradGuard no_grad;
  net->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

void no_mode_layers_from_a_helper() {
  PlainNet net;
  torch::NoGradGuard no_grad;
  net->forward(batch());
}

// A const local computed from the enum parameter is the callers' test too.
enum class Stage { Refit, Score };
void set_mode(Tagger &net, bool training) { net->train(training); }
void nightly(Tagger &net, Stage stage) {
  const bool training = stage == Stage::Refit;
  set_mode(net, training);
}

void score_after_refit() {
  Tagger net;
  net->eval();
  nightly(net, Stage::Refit);
  torch::NoGradGuard no_grad;
  net->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

void score_after_scoring_stage() {
  Tagger net;
  nightly(net, Stage::Score);
  torch::NoGradGuard no_grad;
  net->forward(batch());
}

// --- Branches on known values -------------------------------------------------

enum class RunKind { Fit, Evaluate };

void set_run_kind(torch::nn::Module &m, RunKind phase) {
  switch (phase) {
  case RunKind::Fit:
    m.train();
    break;
  case RunKind::Evaluate:
    m.eval();
    break;
  }
}

void set_run_kind_if(torch::nn::Module &m, RunKind phase) {
  if (phase == RunKind::Fit)
    m.train();
  else
    m.eval();
}

void phases_by_helper(Tagger &net, torch::Tensor x) {
  torch::NoGradGuard no_grad;
  set_run_kind(*net, RunKind::Evaluate);
  net->forward(x);
  set_run_kind_if(*net, RunKind::Evaluate);
  net->forward(x);
  set_run_kind(*net, RunKind::Fit);
  net->forward(x);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'net' is evaluated in training mode
}

void phase_in_a_local(Tagger &net, torch::Tensor x) {
  torch::NoGradGuard no_grad;
  RunKind phase = RunKind::Evaluate;
  switch (phase) {
  case RunKind::Fit:
    net->train();
    break;
  default:
    net->eval();
  }
  net->forward(x);
}
