// RUN: %check_torch_tidy %s torch-host-sync-in-loop %t

#include <torch/torch.h>
#include <iostream>
#include <cstdio>
#include <functional>
#include <vector>

struct NetImpl : torch::nn::Module { torch::nn::Linear fc{nullptr}; // has parameters
  torch::Tensor forward(torch::Tensor x) { return x * 2; }
};
TORCH_MODULE(Net);

void log_value(double v);

// --- Template training loops ----------------------------------------------------

template <typename DataLoader>
void train(Net &model, DataLoader &loader, torch::optim::Optimizer &optimizer,
           torch::Device device) {
  for (auto &batch : loader) {
    auto data = batch.data.to(device);
    auto target = batch.target.to(device);
    optimizer.zero_grad();
    auto loss = torch::nn::functional::nll_loss(model->forward(data), target);
    loss.backward();
    optimizer.step();
    log_value(loss.template item<double>());
    // CHECK-MESSAGES: :[[@LINE-1]]:29: warning: 'loss.template item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA
    // CHECK-MESSAGES: :[[@LINE-4]]:10: note: inside this training loop, which calls 'backward()'
  }
}

void run(Net &model, torch::optim::SGD &optimizer, torch::Device device) {
  auto a = torch::data::make_data_loader(
      torch::data::datasets::MNIST("a").map(torch::data::transforms::Stack<>()),
      64);
  auto b = torch::data::make_data_loader(
      torch::data::datasets::MNIST("b").map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(8));
  train(model, *a, optimizer, device);
  train(model, *b, optimizer, device);
}

// --- Member functions and class state -------------------------------------------

class Trainer {
public:
  Trainer(Net model, torch::optim::SGD &optimizer)
      : model_(model), optimizer_(optimizer), device_(torch::kCUDA) {
    model_->to(device_);
  }
  void fit(int steps) {
    for (int step = 0; step < steps; ++step) {
      auto x = torch::randn({8, 4}).to(device_);
      auto loss = model_->forward(x).sum();
      optimizer_.zero_grad();
      loss.backward();
      optimizer_.step();
      std::cout << loss << std::endl;
      // CHECK-MESSAGES: :[[@LINE-1]]:17: warning: printing 'loss' copies it to the host and synchronises with the GPU on every training step
    }
  }

private:
  Net model_;
  torch::optim::SGD &optimizer_;
  torch::Device device_;
};

// A training step in a helper makes the loop a training loop.
torch::Tensor train_step(Net &model, torch::optim::SGD &opt,
                         const torch::Tensor &x) {
  opt.zero_grad();
  auto loss = model->forward(x).sum();
  loss.backward();
  opt.step();
  return loss;
}

void loop_around_a_step_helper(Net &model, torch::optim::SGD &opt) {
  model->to(torch::kCUDA);
  for (int i = 0; i < 100; ++i) {
    auto loss = train_step(model, opt, torch::randn({2, 4}, torch::kCUDA));
    log_value(loss.item<double>());
    // CHECK-MESSAGES: :[[@LINE-1]]:20: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step
    // CHECK-MESSAGES: :[[@LINE-3]]:17: note: inside this training loop, which calls 'train_step()'
  }
}

// --- Negatives -------------------------------------------------------------------

void logging_every_n_steps(Net &model, torch::optim::SGD &opt) {
  model->to(torch::kCUDA);
  for (int i = 0; i < 100; ++i) {
    auto loss = train_step(model, opt, torch::randn({2, 4}, torch::kCUDA));
    if (i % 10 == 0)
      log_value(loss.item<double>());
  }
}

double evaluate_on_cpu(Net &model, torch::optim::SGD &opt) {
  double total = 0;
  for (int i = 0; i < 100; ++i) {
    auto loss = train_step(model, opt, torch::randn({2, 4}));
    total += loss.item<double>();
  }
  return total;
}

// A function with its own training loop is a whole training run: the sweep
// that calls it is no training loop, and the score read after the inner
// loop runs once per trial.
double run_trial(double lr, torch::Device device) {
  Net net;
  net->to(device);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(lr));
  for (int step = 0; step < 100; ++step) {
    auto x = torch::ones({8, 4}, device);
    auto loss = torch::mse_loss(net->forward(x), x);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  torch::NoGradGuard no_grad;
  auto x = torch::ones({8, 4}, device);
  return torch::mse_loss(net->forward(x), x).item<double>();
}

void hyperparameter_sweep(torch::Device device) {
  for (double lr : {0.1, 0.01, 0.001})
    std::cout << run_trial(lr, device) << '\n';
}

// A callback lambda handed the loss on every training step reads it back
// there: the lambda's parameter takes the argument's device.
void train_with_callback(Net net, torch::Device device) {
  std::vector<double> curve;
  auto record = [&curve](const torch::Tensor &loss) {
    curve.push_back(loss.item<double>());
    // CHECK-MESSAGES: :[[@LINE-1]]:26: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
  };
  for (int step = 0; step < 100; ++step) {
    auto loss = net->forward(torch::randn({8, 4}, device)).sum();
    loss.backward();
    record(loss);
  }
}

// The same callback run once, after the loop: silent.
void train_then_report(Net net, torch::Device device) {
  std::vector<double> curve;
  auto record = [&curve](const torch::Tensor &loss) {
    curve.push_back(loss.item<double>());
  };
  torch::Tensor last;
  for (int step = 0; step < 100; ++step) {
    last = net->forward(torch::randn({8, 4}, device)).sum();
    last.backward();
  }
  record(last);
}

// A constructor stores its device parameter in a member and builds a
// tensor on the parameter itself: both are the device the callers pass.
class LabelledTrainer {
public:
  LabelledTrainer(torch::Device device, int64_t n)
      : device_(device),
        labels_(torch::zeros({n}, torch::TensorOptions().device(device))) {}
  torch::Tensor step() {
    auto out = net_->forward(torch::randn({8, 4}, device_));
    auto loss = (out - labels_).sum();
    loss.backward();
    return loss.detach();
  }
  void fit(std::vector<double> &history) {
    for (int i = 0; i < 10; ++i)
      history.push_back(step().item<double>());
    // CHECK-MESSAGES: :[[@LINE-1]]:32: warning: 'step().item<double>()' synchronises the host with the GPU on every training step{{.*}}[torch-host-sync-in-loop]
  }

private:
  torch::Device device_;
  torch::Tensor labels_;
  Net net_;
};

void fit_labelled(torch::Device device) {
  std::vector<double> history;
  LabelledTrainer trainer(device, 8);
  trainer.fit(history);
}

// A method's tensor on the member that keeps the constructor's device
// parameter, read back on every step of a loop in another function: the
// member is the device the program passed to the constructor.
class Learner {
public:
  explicit Learner(torch::Device device) : device_(device) {}
  void learn(std::vector<double> &log) {
    auto out = net_->forward(torch::randn({8, 4}).to(device_)) *
               torch::ones({8, 2}).to(device_);
    out.sum().backward();
    log.push_back(out.mean().item<double>());
    // CHECK-MESSAGES: :[[@LINE-1]]:30: warning: 'out.mean().item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
  }

private:
  torch::Device device_;
  Net net_;
};

void run_learner() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Learner learner(device);
  std::vector<double> log;
  for (int k = 0; k < 50; ++k)
    learner.learn(log);
}

// The same learner built on the CPU: silent.
void run_cpu_learner() {
  Learner learner(torch::kCPU);
  std::vector<double> log;
  for (int k = 0; k < 50; ++k)
    learner.learn(log);
}

// A helper reading back a value computed from two of its tensors, called on
// every step: its one caller proves the device, so the helper's context
// judges the read with the caller's loop.
bool drifted(const torch::Tensor &before, const torch::Tensor &after) {
  return (before - after).abs().sum().item<double>() > 1.0;
  // CHECK-MESSAGES: :[[@LINE-1]]:39: warning: '(before - after).abs().sum().item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
}

void train_until_drift(Net net, torch::Device device) {
  auto reference = net->forward(torch::randn({8, 4}, device)).detach();
  for (int step = 0; step < 100; ++step) {
    auto out = net->forward(torch::randn({8, 4}, device));
    out.sum().backward();
    if (drifted(reference, out))
      break;
  }
}

// The same check every 50 steps: silent.
bool drifted_rarely(const torch::Tensor &before, const torch::Tensor &after) {
  return (before - after).abs().sum().item<double>() > 1.0;
}

void train_checking_drift_rarely(Net net, torch::Device device) {
  auto reference = net->forward(torch::randn({8, 4}, device)).detach();
  for (int step = 0; step < 100; ++step) {
    auto out = net->forward(torch::randn({8, 4}, device));
    out.sum().backward();
    if (step % 50 == 0 && drifted_rarely(reference, out))
      break;
  }
}

// Callbacks kept in a vector, each run once after every step: a callback
// that reads the loss back runs on every step.
using StepCallback = std::function<void(int, const torch::Tensor &)>;

void fit_with_callbacks(Net net, torch::Device device,
                        const std::vector<StepCallback> &callbacks) {
  for (int step = 0; step < 100; ++step) {
    auto loss = net->forward(torch::randn({8, 4}, device)).sum();
    loss.backward();
    for (const auto &cb : callbacks)
      cb(step, loss);
  }
}

void run_fit_with_callbacks(torch::Device device) {
  std::vector<double> curve;
  auto record = [&curve](int, const torch::Tensor &loss) {
    curve.push_back(loss.item<double>());
    // CHECK-MESSAGES: :[[@LINE-1]]:26: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
  };
  std::vector<StepCallback> callbacks{record};
  Net net;
  net->to(device);
  fit_with_callbacks(net, device, callbacks);
}

// The callbacks run once, after training: silent.
void fit_then_callbacks(Net net, torch::Device device,
                        const std::vector<StepCallback> &callbacks) {
  torch::Tensor loss;
  for (int step = 0; step < 100; ++step) {
    loss = net->forward(torch::randn({8, 4}, device)).sum();
    loss.backward();
  }
  for (const auto &cb : callbacks)
    cb(100, loss);
}

void run_fit_then_callbacks(torch::Device device) {
  std::vector<double> curve;
  auto record = [&curve](int, const torch::Tensor &loss) {
    curve.push_back(loss.item<double>());
  };
  std::vector<StepCallback> callbacks{record};
  Net net;
  net->to(device);
  fit_then_callbacks(net, device, callbacks);
}

// A hook called through its base on every step: the override runs there,
// with the loss its base's caller hands it.
struct StepHook {
  virtual ~StepHook() = default;
  virtual void after_step(const torch::Tensor &loss) = 0;
};
struct PrintingHook final : StepHook {
  void after_step(const torch::Tensor &loss) override {
    std::cout << loss.item<float>() << "\n";
    // CHECK-MESSAGES: :[[@LINE-1]]:23: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
  }
};
void fit_with_hook(Net net, torch::Device device, StepHook &hook,
                   torch::optim::SGD &opt) {
  for (int step = 0; step < 100; ++step) {
    auto loss = net->forward(torch::randn({8, 4}, device)).sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
    hook.after_step(loss);
  }
}

// A hook run once, after training: silent.
struct DoneHook {
  virtual ~DoneHook() = default;
  virtual void on_done(const torch::Tensor &loss) = 0;
};
struct PrintingDoneHook final : DoneHook {
  void on_done(const torch::Tensor &loss) override {
    std::cout << loss.item<float>() << "\n";
  }
};
void fit_then_hook(Net net, torch::Device device, DoneHook &hook,
                   torch::optim::SGD &opt) {
  torch::Tensor loss;
  for (int step = 0; step < 100; ++step) {
    loss = net->forward(torch::randn({8, 4}, device)).sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  hook.on_done(loss);
}

// Options in a static member, set by a static init() that reads them first,
// called before training: the path holds what init() wrote.
struct Controller {
  static torch::TensorOptions options;
  static torch::TensorOptions cpu_options;
  static void init() {
    options = options.device(torch::kCUDA);
    cpu_options = cpu_options.device(torch::kCPU);
  }
  static void train(Net net, torch::optim::SGD &opt) {
    for (int step = 0; step < 100; ++step) {
      auto batch = torch::zeros({8, 4}, options);
      auto loss = net->forward(batch).sum();
      opt.zero_grad();
      loss.backward();
      opt.step();
      float seen = batch.sum().item<float>();
      // CHECK-MESSAGES: :[[@LINE-1]]:32: warning: 'batch.sum().item<float>()' synchronises the host with the GPU on every training step{{.*}}[torch-host-sync-in-loop]
      auto host = torch::zeros({8, 4}, cpu_options);
      float kept = host.sum().item<float>();
    }
  }
};
torch::TensorOptions Controller::options = torch::TensorOptions();
torch::TensorOptions Controller::cpu_options = torch::TensorOptions();
int run_controller() {
  if (!torch::cuda::is_available())
    return 1;
  Controller::init();
  Net net;
  net->to(torch::kCUDA);
  torch::optim::SGD opt(net->parameters(), 0.1);
  Controller::train(net, opt);
  return 0;
}

// A module's own method that runs a submodule: the submodule moves with the
// module, so the output is on the module's device.
struct ScorerNetImpl : torch::nn::Module {
  ScorerNetImpl() : fc(register_module("fc", torch::nn::Linear(4, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::Tensor training_loss(torch::Tensor x) { return fc(x).mean(); }
  torch::nn::Linear fc;
};
TORCH_MODULE(ScorerNet);
void fit_scorer(torch::Device device) {
  ScorerNet net;
  net->to(device);
  torch::optim::SGD opt(net->parameters(), 0.1);
  double total = 0;
  for (int step = 0; step < 100; ++step) {
    auto loss = net->training_loss(torch::randn({8, 4}, device));
    opt.zero_grad();
    loss.backward();
    opt.step();
    total += loss.item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:19: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
  }
}
// The same module left on the CPU: silent.
void fit_scorer_on_cpu() {
  ScorerNet net;
  torch::optim::SGD opt(net->parameters(), 0.1);
  double total = 0;
  for (int step = 0; step < 100; ++step) {
    auto loss = net->training_loss(torch::randn({8, 4}));
    opt.zero_grad();
    loss.backward();
    opt.step();
    total += loss.item<double>();
  }
}

// A device member chosen at run time by an initialiser that its caller runs
// first: after that call the member holds a device variable, not what the
// constructor put there.
class Segmenter {
public:
  void initialize(int gpu_id) {
    device_ = gpu_id >= 0 ? torch::Device(torch::kCUDA, gpu_id)
                          : torch::Device(torch::kCPU);
    net_->to(device_);
  }
  void train(int epochs) {
    torch::optim::SGD opt(net_->parameters(), 0.1);
    float total = 0;
    for (int e = 0; e < epochs; ++e) {
      auto loss = net_->forward(torch::randn({2, 4}).to(device_)).sum();
      opt.zero_grad();
      loss.backward();
      opt.step();
      total += loss.item<float>();
      // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step where 'device_' is CUDA{{.*}}[torch-host-sync-in-loop]
    }
  }

private:
  torch::Device device_ = torch::Device(torch::kCPU);
  Net net_;
};
void segment(int gpu_id) {
  Segmenter s;
  s.initialize(gpu_id);
  s.train(3);
}

// A device chosen as a DeviceType (`auto type = ... ? kCUDA : kCPU`) is a
// device variable like a torch::Device.
void train_on_type() {
  auto type = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  Net net;
  net->to(type);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    auto loss = net->forward(torch::randn({2, 4}).to(type)).sum();
    loss.backward();
    opt.step();
    std::cout << loss.item<float>();
    // CHECK-MESSAGES: :[[@LINE-1]]:23: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step where 'type' is CUDA{{.*}}[torch-host-sync-in-loop]
  }
}

// Near-miss: a device parameter whose default argument every caller takes
// is that default, the CPU.
void train_on(Net &net, int steps, torch::Device device = torch::kCPU) {
  net->to(device);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    auto loss = net->forward(torch::randn({2, 4}).to(device)).sum();
    loss.backward();
    opt.step();
    std::cout << loss.item<float>();
  }
}
void train_with_default() {
  Net net;
  train_on(net, 10);
}

// A module method other than forward runs a submodule: its result is on the
// device of the module the caller passes (a submodule moves with it), here
// through a helper that returns the terms of the loss as a pair.
struct VaeImpl : torch::nn::Module {
  VaeImpl() : head(register_module("head", torch::nn::Linear(4, 4))) {}
  std::pair<torch::Tensor, torch::Tensor> encode(const torch::Tensor &x) {
    auto h = head->forward(x);
    return {h, torch::exp(h)};
  }
  torch::Tensor forward(const torch::Tensor &x) { return encode(x).first; }
  torch::nn::Linear head;
};
TORCH_MODULE(Vae);
std::pair<torch::Tensor, torch::Tensor> loss_terms(Vae &vae, const torch::Tensor &x) {
  auto [mu, var] = vae->encode(x);
  return {mu.pow(2).mean(), var.mean()};
}
void train_vae(torch::Device device) {
  Vae vae;
  vae->to(device);
  torch::optim::SGD opt(vae->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 100; ++step) {
    auto [rec, kl] = loss_terms(vae, torch::randn({2, 4}));
    auto loss = rec + kl;
    opt.zero_grad();
    loss.backward();
    opt.step();
    double watched = kl.item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:25: warning: 'kl.item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
    log_value(watched);
  }
}
void train_vae_on_host() {
  Vae vae;
  torch::optim::SGD opt(vae->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 100; ++step) {
    auto [rec, kl] = loss_terms(vae, torch::randn({2, 4}));
    auto loss = rec + kl;
    opt.zero_grad();
    loss.backward();
    opt.step();
    log_value(kl.item<double>()); // near-miss: the module stays on the CPU
  }
}

// --- A CRTP base runs the steps of its derived trainer ------------------------

template <class Derived> class StepLoop {
public:
  void run(int steps) {
    for (int s = 0; s < steps; ++s) {
      auto loss = self().train_step();
      self().on_step_end(loss);
    }
  }

private:
  Derived &self() { return static_cast<Derived &>(*this); }
};

// The model member is the caller's module (a holder copied in), on the
// trainer's device.
class DeviceTrainer : public StepLoop<DeviceTrainer> {
public:
  DeviceTrainer(Net net, torch::Device device)
      : net_(std::move(net)), device_(device),
        opt_(net_->parameters(), torch::optim::SGDOptions(0.1)) {}
  torch::Tensor train_step() {
    auto loss = net_->forward(torch::randn({8, 4}).to(device_)).mean();
    opt_.zero_grad();
    loss.backward();
    opt_.step();
    return loss.detach();
  }
  void on_step_end(const torch::Tensor &loss) {
    total_ += loss.item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:20: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}
    // CHECK-MESSAGES: :{{[0-9]+}}:14: note: called on every training step from here
    // CHECK-MESSAGES: :{{[0-9]+}}:26: note: inside this training loop, which calls 'train_step()'
    // CHECK-MESSAGES: :{{[0-9]+}}:8: note: 'loss' is on 'device' from here
  }

private:
  Net net_;
  torch::Device device_;
  torch::optim::SGD opt_;
  double total_ = 0;
};

void crtp_trainer(torch::Device device) {
  Net net;
  net->to(device);
  DeviceTrainer trainer(net, device);
  trainer.run(100);
}

// A recorder reads the loss back when its scope closes: at the end of every
// training step. One built after the loop reads it once.
class LossRecorder {
public:
  LossRecorder(std::vector<float> &history, const torch::Tensor &loss)
      : history_(history), loss_(loss.detach()) {}
  ~LossRecorder() { history_.push_back(loss_.item<float>()); }
  // CHECK-MESSAGES: :[[@LINE-1]]:46: warning: 'loss_.item<float>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}

private:
  std::vector<float> &history_;
  torch::Tensor loss_;
};

class FinalLoss {
public:
  explicit FinalLoss(const torch::Tensor &loss) : loss_(loss.detach()) {}
  ~FinalLoss() { std::printf("%f\n", loss_.item<float>()); }

private:
  torch::Tensor loss_;
};

void recorded_training(Net &net, torch::Device device, int steps) {
  std::vector<float> history;
  torch::Tensor last;
  for (int i = 0; i < steps; ++i) {
    auto loss = net->forward(torch::randn({8, 4}, device)).sum();
    loss.backward();
    LossRecorder record(history, loss);
    last = loss;
  }
  FinalLoss final_loss(last);
}

// A loss module handed by reference computes on its input's device, not
// on the device of the caller's (parameterless) handle.
void epoch_with_criterion(Net &net, torch::nn::CrossEntropyLoss &criterion,
                          torch::optim::SGD &opt, torch::Device device, int steps) {
  double total = 0;
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    auto loss = criterion(net->forward(torch::randn({8, 4}, device)),
                          torch::zeros({8}, torch::TensorOptions().dtype(torch::kLong).device(device)));
    loss.backward();
    opt.step();
    total += loss.item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:19: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step
  }
  std::printf("%f\n", total);
}

void run_epoch_with_criterion(torch::Device device) {
  Net net;
  net->to(device);
  torch::nn::CrossEntropyLoss criterion;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  epoch_with_criterion(net, criterion, opt, device, 10);
}

// --- Member functions as callables --------------------------------------------
// std::bind(&C::m, this, _1) in a std::function member, a local bind, and a
// pointer to a member function picked in the constructor: the loop that calls
// them runs the member function on every step.
class BoundLogger {
public:
  explicit BoundLogger(torch::Device d) : device_(d) {
    step_ = std::bind(&BoundLogger::log_step, this, std::placeholders::_1);
  }
  void fit() {
    for (int i = 0; i < 10; ++i) {
      auto loss = torch::ones({4}, device_).sum();
      loss.backward();
      step_(loss);
    }
  }

private:
  void log_step(const torch::Tensor &loss) { std::printf("%f\n", loss.item<double>()); }
  // CHECK-MESSAGES: :[[@LINE-1]]:71: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step
  torch::Device device_;
  std::function<void(const torch::Tensor &)> step_;
};

struct LocalBind {
  torch::Device device_{torch::kCUDA};
  void report(const torch::Tensor &loss) { std::printf("%f\n", loss.item<double>()); }
  // CHECK-MESSAGES: :[[@LINE-1]]:69: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step
  void fit() {
    auto report_fn = std::bind(&LocalBind::report, this, std::placeholders::_1);
    for (int i = 0; i < 10; ++i) {
      auto loss = torch::ones({4}, device_).sum();
      loss.backward();
      report_fn(loss);
    }
  }
};

class PickedStep {
public:
  using Step = void (PickedStep::*)(const torch::Tensor &);
  PickedStep(torch::Device d, bool verbose)
      : device_(d), step_(verbose ? &PickedStep::verbose : &PickedStep::quiet) {}
  void fit() {
    for (int i = 0; i < 10; ++i)
      (this->*step_)(torch::ones({4}, device_));
  }

private:
  void verbose(const torch::Tensor &x) {
    auto loss = x.sum();
    loss.backward();
    std::printf("%f\n", loss.item<double>());
    // CHECK-MESSAGES: :[[@LINE-1]]:30: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step
  }
  void quiet(const torch::Tensor &x) { x.sum().backward(); }
  torch::Device device_;
  Step step_;
};

// A bind that reorders or fixes arguments is not followed: unknown stays
// unknown.
struct FixedArgument {
  torch::Device device_{torch::kCUDA};
  void report(const torch::Tensor &loss, int every) { std::printf("%f %d\n", loss.item<double>(), every); }
  void fit() {
    auto report_fn = std::bind(&FixedArgument::report, this, std::placeholders::_1, 10);
    for (int i = 0; i < 10; ++i) {
      auto loss = torch::ones({4}, device_).sum();
      loss.backward();
      report_fn(loss);
    }
  }
};

void run_member_callables() {
  BoundLogger a(torch::kCUDA);
  a.fit();
  LocalBind b;
  b.fit();
  PickedStep c(torch::kCUDA, true);
  c.fit();
  FixedArgument d;
  d.fit();
}

// A trainer whose validate() switches the module it holds to eval() mode,
// run by a template fit() that has the trainer by reference: the module
// stays on the device main put it on (what fit() does not touch of the
// trainer stays its caller's), so the fine-tuning loop's item() syncs.
template <typename Model> class ModeTrainer {
public:
  explicit ModeTrainer(Model model) : model_(std::move(model)) {}
  double validate() {
    model_->eval();
    torch::NoGradGuard no_grad;
    return 0.0;
  }
  Model &model() { return model_; }

private:
  Model model_;
};
template <typename Model> void fit_with_validation(ModeTrainer<Model> &trainer) {
  trainer.validate();
  for (int epoch = 0; epoch < 3; ++epoch)
    trainer.validate();
}
void fine_tune(Net &net) {
  net->train();
  for (int i = 0; i < 3; ++i) {
    auto loss = net->forward(torch::ones({2, 4})).sum();
    loss.backward();
    std::printf("%f\n", loss.item<double>());
    // CHECK-MESSAGES: :[[@LINE-1]]:30: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step
  }
}
void run_mode_trainers() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  Net cpu_net;
  ModeTrainer<Net> cpu_trainer(cpu_net);
  Net net;
  net->to(device);
  ModeTrainer<Net> trainer(net);
  fit_with_validation(trainer);
  fine_tune(trainer.model());
}
