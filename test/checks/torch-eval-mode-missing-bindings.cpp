// RUN: %check_torch_tidy %s torch-eval-mode-missing %t
//
// Objects whose members name the caller's module (a `Module &` member, a
// holder copied in by the constructor): what their methods and destructors
// do to the member happens to the caller's module, and their evaluations
// are judged on it. A helper that changes the mode on some paths only leaves
// the caller's mode known when both agree.

#include <torch/torch.h>

struct NetImpl : torch::nn::Module {
  NetImpl() {
    fc = register_module("fc", torch::nn::Linear(8, 2));
    drop = register_module("drop", torch::nn::Dropout(0.5));
  }
  torch::Tensor forward(torch::Tensor x) { return drop(fc(x)); }
  torch::nn::Linear fc{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Net);

torch::Tensor batch();

// Holds a reference to the caller's model.
class Scorer {
public:
  explicit Scorer(Net &net) : net_(net) {}
  double score() {
    torch::NoGradGuard no_grad;
    return net_->forward(batch()).sum().item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: module 'net_' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
  }

private:
  Net &net_;
};

void scorer_of_a_training_model() {
  Net net;
  Scorer scorer(net);
  scorer.score();
}

void scorer_after_eval() {
  Net net;
  Scorer scorer(net);
  net->eval();
  scorer.score(); // the member names `net`, now in evaluation mode
}

// Switches to eval() for its scope and back to train() when it ends.
class EvalScope {
public:
  explicit EvalScope(torch::nn::Module &module) : module_(module) { module_.eval(); }
  ~EvalScope() { module_.train(); }

private:
  torch::nn::Module &module_;
};

double measure(Net &net) {
  torch::NoGradGuard no_grad;
  return net->forward(batch()).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

void measured_after_the_scope_ends() {
  Net net;
  {
    EvalScope scope(*net);
    measure(net); // in evaluation mode here
  }
  measure(net); // the destructor's train()
}

// A holder copied into a base's member, through an inherited constructor.
class TrainerBase {
public:
  explicit TrainerBase(Net model) : model_(std::move(model)) {}
  void fit() {
    for (int epoch = 0; epoch < 3; ++epoch) {
      model_->train();
      model_->eval();
    }
    model_->train();
  }
  Net &model() { return model_; }

protected:
  Net model_;
};

class QuickTrainer : public TrainerBase {
public:
  using TrainerBase::TrainerBase;
};

double evaluate(Net &net) {
  torch::NoGradGuard no_grad;
  return net->forward(batch()).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

void evaluated_after_fit() {
  Net net;
  QuickTrainer trainer(net);
  trainer.fit(); // leaves `net` in training mode
  evaluate(net);
}

void switched_through_the_getter() {
  Net net;
  QuickTrainer trainer(net);
  trainer.fit();
  trainer.model()->eval();
  evaluate(net); // the getter returned the caller's module
}

// Changes the mode on some paths only.
void maybe_resume(Net &net, bool resume) {
  if (resume)
    net->train();
}
void eval_each_epoch(Net &net, int epochs) {
  for (int i = 0; i < epochs; ++i)
    net->eval();
}

double probe(Net &net) {
  torch::NoGradGuard no_grad;
  return net->forward(batch()).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}

void training_on_both_paths() {
  Net net;
  maybe_resume(net, true); // train() or the training mode it had
  probe(net);
}

double probe_quietly(Net &net) {
  torch::NoGradGuard no_grad;
  return net->forward(batch()).sum().item<double>();
}

void evaluation_on_both_paths() {
  Net net;
  net->eval();
  eval_each_epoch(net, 0); // eval() or the evaluation mode it had
  probe_quietly(net);
}

void paths_disagree() {
  Net net;
  net->eval();
  maybe_resume(net, false); // which path runs is the argument's: unknown
  probe_quietly(net);
}

void moved_trainer() {
  Net net;
  QuickTrainer trainer(net);
  QuickTrainer other = std::move(trainer);
  other.model()->eval();
  probe_quietly(net); // `other` holds the module now: unknown here
}

// A holder copied in, beside members that hold modules of their own (null,
// default-constructed): those cannot name the caller's module, so the
// copied one still does. Built by std::make_unique as by a declaration.
class Distiller {
public:
  Distiller(Net teacher, Net student)
      : teacher_(std::move(teacher)), student_(std::move(student)) {}
  void soft_targets() {
    torch::NoGradGuard no_grad;
    teacher_->forward(batch());
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module 'teacher_' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
  }

private:
  Net teacher_, student_;
  torch::nn::Linear probe_{nullptr};
  Net shadow_;
};

void distil_local() {
  Net teacher, student;
  Distiller d(teacher, student);
  d.soft_targets();
}

void distil_owned() {
  Net teacher, student;
  auto d = std::make_unique<Distiller>(teacher, student);
  d->soft_targets();
}

void distil_evaluated_teacher() {
  Net teacher, student;
  teacher->eval();
  auto d = std::make_unique<Distiller>(teacher, student);
  d->soft_targets();
}

// An object a std::unique_ptr owns binds its members to what make_unique
// passed: its constructor and destructor switch the caller's module.
class PreviewServer {
public:
  explicit PreviewServer(Net net) : net_(net) { net_->eval(); }
  ~PreviewServer() { net_->train(); }

private:
  Net net_;
};

void evaluate_after_owned_server() {
  Net net;
  net->train();
  auto server = std::make_unique<PreviewServer>(net);
  torch::NoGradGuard no_grad;
  net->forward(batch());
}

void train_after_owned_server() {
  Net net;
  {
    auto server = std::make_unique<PreviewServer>(net);
  }
  torch::NoGradGuard no_grad;
  net->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'net' is evaluated in training mode{{.*}}[torch-eval-mode-missing]
}
