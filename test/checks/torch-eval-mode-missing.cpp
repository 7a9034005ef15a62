// RUN: %check_torch_tidy %s torch-eval-mode-missing %t

#include <torch/torch.h>

struct ClassifierImpl : torch::nn::Module {
  ClassifierImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(8, 16));
    drop = register_module("drop", torch::nn::Dropout(0.3));
    fc2 = register_module("fc2", torch::nn::Linear(16, 2));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(drop(torch::relu(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Classifier);

// Layers built into a Sequential: the class holds a BatchNorm all the same.
struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl() {
    body = register_module("body", torch::nn::Sequential(torch::nn::Conv2d(3, 8, 3),
                                                         torch::nn::BatchNorm2d(8)));
  }
  torch::Tensor forward(torch::Tensor x) { return body->forward(x); }
  torch::nn::Sequential body{nullptr};
};
TORCH_MODULE(ConvNet);

// A functional dropout that reads the module's own mode.
struct NoisyHeadImpl : torch::nn::Module {
  NoisyHeadImpl() { fc = register_module("fc", torch::nn::Linear(8, 2)); }
  torch::Tensor forward(torch::Tensor x) {
    return fc(torch::dropout(x, 0.2, is_training()));
  }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(NoisyHead);

// No layer that depends on the mode.
struct LinearProbeImpl : torch::nn::Module {
  LinearProbeImpl() { fc = register_module("fc", torch::nn::Linear(8, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(LinearProbe);

torch::Tensor batch();
void configure(Classifier &model); // defined elsewhere

void fresh_model_evaluated() {
  Classifier model;
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 10; ++i)
    model->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module 'model' is evaluated in training mode: dropout stays on{{.*}}[torch-eval-mode-missing]
  // CHECK-MESSAGES: :[[@LINE-5]]:14: note: 'model' is in training mode from here
  // CHECK-MESSAGES: :[[@LINE-4]]:3: note: switch 'model' to evaluation mode before this loop
}

void evaluated_after_eval() {
  Classifier model;
  model->eval();
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 10; ++i)
    model->forward(batch());
}

void no_mode_dependent_layer() {
  LinearProbe probe;
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 10; ++i)
    probe->forward(batch());
}

void batch_norm_in_sequential() {
  ConvNet net;
  torch::NoGradGuard no_grad;
  auto out = net->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: module 'net' is evaluated in training mode
}

// A loop that never calls backward() evaluates, guard or not.
double functional_dropout_in_prediction_loop() {
  NoisyHead head;
  double total = 0;
  for (int i = 0; i < 10; ++i)
    total += head(batch()).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: module 'head' is evaluated in training mode
  return total;
}

// The mode a helper's module is in is its callers': one of them never
// switched it.
double accuracy(Classifier &model) {
  torch::NoGradGuard no_grad;
  double correct = 0;
  for (int i = 0; i < 10; ++i)
    correct += model->forward(batch()).argmax(1).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: module 'model' is evaluated in training mode
  return correct;
}

void train_epoch(Classifier &model, torch::optim::Optimizer &opt) {
  model->train();
  for (int i = 0; i < 10; ++i) {
    auto loss = model->forward(batch()).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

void fit(Classifier &model, torch::optim::Optimizer &opt) {
  for (int epoch = 0; epoch < 5; ++epoch) {
    train_epoch(model, opt);
    accuracy(model);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: note: called here
  }
  model->eval();
  accuracy(model);
}

// A helper that switches the mode itself: nothing for its callers to do.
double accuracy_in_eval(Classifier &model) {
  model->eval();
  torch::NoGradGuard no_grad;
  double correct = 0;
  for (int i = 0; i < 10; ++i)
    correct += model->forward(batch()).argmax(1).sum().item<double>();
  return correct;
}

void fit_with_eval_helper(Classifier &model, torch::optim::Optimizer &opt) {
  for (int epoch = 0; epoch < 5; ++epoch) {
    train_epoch(model, opt);
    accuracy_in_eval(model);
  }
}

// eval() on one path only.
void eval_on_one_path(bool quick) {
  Classifier model;
  if (!quick)
    model->eval();
  torch::NoGradGuard no_grad;
  model->forward(batch());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: module 'model' is evaluated in training mode
  // CHECK-MESSAGES: :[[@LINE-6]]:14: note: 'model' is left in training mode on a path from here
}

// The reverse: a training loop on a module left in evaluation mode.
void trains_in_eval_mode(torch::optim::Optimizer &opt) {
  Classifier model;
  model->eval();
  for (int i = 0; i < 10; ++i) {
    auto loss = model->forward(batch()).mean();
    // CHECK-MESSAGES: :[[@LINE-1]]:17: warning: module 'model' is in evaluation mode where its output trains{{.*}}[torch-eval-mode-missing]
    // CHECK-MESSAGES: :[[@LINE-4]]:10: note: 'model' is put in evaluation mode here
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

// A distillation teacher under a no-grad guard in the training loop is
// evaluated: it must be in eval mode, and the student in train mode.
void distill(Classifier &student, torch::optim::Optimizer &opt) {
  Classifier teacher;
  Classifier frozen;
  frozen->eval();
  student->train();
  for (int i = 0; i < 10; ++i) {
    auto x = batch();
    torch::Tensor soft, fixed;
    {
      torch::NoGradGuard no_grad;
      soft = teacher->forward(x);
      // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: module 'teacher' is evaluated in training mode
      fixed = frozen->forward(x);
    }
    auto loss = (student->forward(x) - soft - fixed).pow(2).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

// Handed to a function whose body is unknown: its mode is unknown.
void mode_unknown_after_opaque_call() {
  Classifier model;
  configure(model);
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 10; ++i)
    model->forward(batch());
}

// A validation lambda that captures the caller's module parameter by
// reference: it sees the mode the caller left, train() at each epoch.
void validate_through_capture(Classifier &net, torch::Tensor x) {
  auto validate = [&] {
    torch::NoGradGuard no_grad;
    return net->forward(x).sum();
    // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: module 'net' is evaluated in training mode
  };
  for (int epoch = 0; epoch < 3; ++epoch) {
    net->train();
    validate();
  }
}

void validate_through_capture_after_eval(Classifier &net, torch::Tensor x) {
  auto validate = [&] {
    torch::NoGradGuard no_grad;
    return net->forward(x).sum();
  };
  for (int epoch = 0; epoch < 3; ++epoch) {
    net->train();
    net->eval();
    validate();
  }
}

// A Sequential holds the layers it is built from or given by push_back,
// wherever it is then evaluated.
double score_sequential(torch::nn::Sequential &model, const torch::Tensor &x) {
  torch::NoGradGuard no_grad;
  return model->forward(x).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: module 'with_dropout' is evaluated in training mode
}

void sequentials_built_in_place() {
  torch::nn::Sequential with_dropout(torch::nn::Linear(8, 16), torch::nn::Dropout(0.2),
                                     torch::nn::Linear(16, 2));
  score_sequential(with_dropout, torch::randn({4, 8}));
}

double score_plain_sequential(torch::nn::Sequential &model, const torch::Tensor &x) {
  torch::NoGradGuard no_grad;
  return model->forward(x).sum().item<double>();
}

void plain_sequential() {
  torch::nn::Sequential linear_only(torch::nn::Linear(8, 2));
  score_plain_sequential(linear_only, torch::randn({4, 8}));
}

void sequential_pushed() {
  torch::nn::Sequential built;
  built->push_back(torch::nn::Linear(8, 16));
  built->push_back(torch::nn::Dropout(0.1));
  torch::NoGradGuard no_grad;
  auto y = built->forward(torch::randn({4, 8}));
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: module 'built' is evaluated in training mode
  (void)y;
}

// --- Virtual hooks of a base-class loop ---------------------------------------
// The base's fit() runs one override of each hook: what they disagree on is
// unknown, so a module a derived trainer switched to eval() is not taken to be
// in training mode afterwards; one every override leaves in train() is.
#include <functional>
#include <vector>

class HookedTrainer {
public:
  virtual ~HookedTrainer() = default;
  void fit() {
    on_validation_start();
    on_validation_end();
  }

protected:
  virtual void on_validation_start() {}
  virtual void on_validation_end() {}
};

class SwitchingTrainer : public HookedTrainer {
public:
  explicit SwitchingTrainer(Classifier net) : net_(std::move(net)) {}

protected:
  void on_validation_start() override { net_->eval(); }
  Classifier net_;
};

double score_classifier(Classifier net, const torch::Tensor &x) {
  torch::NoGradGuard no_grad;
  return net->forward(x).sum().item<double>();
}

void evaluated_after_hooked_fit() {
  Classifier net;
  SwitchingTrainer trainer(net);
  trainer.fit();
  score_classifier(net, torch::randn({4, 8}));
}

// Phase callbacks registered from outside: calling them may switch any
// module's mode, so the evaluation after them is not judged.
class PhasedTrainer {
public:
  explicit PhasedTrainer(Classifier net) : net_(std::move(net)) {}
  void on_phase(std::function<void(bool)> cb) { callbacks_.push_back(std::move(cb)); }
  double validate(const torch::Tensor &x) {
    for (auto &cb : callbacks_)
      cb(false);
    torch::NoGradGuard no_grad;
    return net_->forward(x).sum().item<double>();
  }

private:
  Classifier net_;
  std::vector<std::function<void(bool)>> callbacks_;
};

void evaluated_after_callbacks() {
  Classifier net;
  PhasedTrainer trainer(net);
  trainer.on_phase([net](bool training) mutable { net->train(training); });
  trainer.validate(torch::randn({4, 8}));
}

// A step chosen once through a pointer to a member function: fit() runs one
// of the two, and neither changes the mode, so the evaluation after it still
// runs in training mode.
class StepPicker {
public:
  using Step = void (StepPicker::*)(const torch::Tensor &);
  StepPicker(Classifier net, bool twice)
      : net_(std::move(net)), step_(twice ? &StepPicker::twice : &StepPicker::once) {}
  void fit(const torch::Tensor &x) {
    for (int i = 0; i < 3; ++i)
      (this->*step_)(x);
  }

private:
  void once(const torch::Tensor &x) { net_->forward(x).sum().backward(); }
  void twice(const torch::Tensor &x) { net_->forward(x * 2).sum().backward(); }
  Classifier net_;
  Step step_;
};

void evaluated_after_member_pointer_steps() {
  Classifier net;
  StepPicker picker(net, true);
  picker.fit(torch::randn({4, 8}));
  torch::NoGradGuard no_grad;
  auto y = net->forward(torch::randn({4, 8}));
  // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: module 'net' is evaluated in training mode
  (void)y;
}
