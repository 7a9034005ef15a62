// RUN: %check_torch_tidy %s torch-loss-accumulation-graph %t

#include <torch/torch.h>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

std::vector<torch::Tensor> load_batches();
void log_value(const torch::Tensor &t);

// --- Member accumulators ---------------------------------------------------

class Trainer {
public:
  Trainer(Net model, torch::optim::SGD &optimizer)
      : model_(model), optimizer_(optimizer), running_loss_(torch::zeros({})) {}

  void fit_epoch() {
    for (const auto &x : load_batches()) {
      optimizer_.zero_grad();
      auto output = model_->forward(x);
      auto loss = loss_function(output, x);
      loss.backward();
      optimizer_.step();
      running_loss_ += loss;
      // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'loss' is still attached to its autograd graph and is accumulated into member 'running_loss_'; every iteration's graph stays alive and memory grows with each step [torch-loss-accumulation-graph]
      // CHECK-MESSAGES: :[[@LINE-4]]:12: note: 'loss' joins the autograd graph here
    }
  }
  torch::Tensor running_loss() const { return running_loss_; }

private:
  // The loss comes from an opaque callee: backward() proves its graph.
  std::function<torch::Tensor(torch::Tensor, torch::Tensor)> loss_function;
  Net model_;
  torch::optim::SGD &optimizer_;
  torch::Tensor running_loss_;
};

// --- Template loops ----------------------------------------------------------

template <typename DataLoader>
void train(Net &model, DataLoader &loader, torch::optim::Optimizer &optimizer) {
  torch::Tensor epoch_loss = torch::zeros({});
  for (auto &batch : loader) {
    optimizer.zero_grad();
    auto loss = torch::nn::functional::nll_loss(model->forward(batch.data),
                                                batch.target);
    loss.backward();
    optimizer.step();
    epoch_loss += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'epoch_loss', declared outside the loop
    // CHECK-FIXES: {{^}}    epoch_loss += loss.detach();{{$}}
  }
  log_value(epoch_loss);
}

void run(Net &model, torch::optim::SGD &optimizer) {
  auto train_loader = torch::data::make_data_loader(
      torch::data::datasets::MNIST("data").map(
          torch::data::transforms::Stack<>()),
      64);
  auto tune_loader = torch::data::make_data_loader(
      torch::data::datasets::MNIST("tune").map(
          torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(16));
  train(model, *train_loader, optimizer);
  train(model, *tune_loader, optimizer);
}

// --- Nested loops: a critic loop inside a generator loop ------------------

void wgan(Net &generator, Net &critic, torch::optim::Adam &g_opt,
          torch::optim::Adam &c_opt, int epochs, int n_critic) {
  torch::Tensor critic_total = torch::zeros({});
  torch::Tensor generator_total = torch::zeros({});
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (const auto &real : load_batches()) {
      for (int c = 0; c < n_critic; ++c) {
        c_opt.zero_grad();
        auto fake = generator->forward(torch::randn({64, 100})).detach();
        auto c_loss = critic->forward(fake).mean() - critic->forward(real).mean();
        c_loss.backward();
        c_opt.step();
        critic_total += c_loss;
        // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: 'c_loss' is still attached to its autograd graph and is accumulated into 'critic_total', declared outside the loop
      }
      g_opt.zero_grad();
      auto g_loss = -critic->forward(generator->forward(torch::randn({64, 100}))).mean();
      g_loss.backward();
      g_opt.step();
      generator_total = generator_total + g_loss;
      // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'g_loss' is still attached to its autograd graph and is accumulated into 'generator_total', declared outside the loop
    }
  }
  log_value(critic_total);
  log_value(generator_total);
}

// --- A loss that comes from a helper ------------------------------------------

torch::Tensor compute_loss(Net &model, const torch::Tensor &x) {
  return torch::nn::functional::mse_loss(model->forward(x), x);
}

void helper_loss(Net &model) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    auto loss = compute_loss(model, x);
    total += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' (from 'compute_loss()' at {{.*}}:[[@LINE-8]]) is still attached to its autograd graph and is accumulated into 'total', declared outside the loop
    // CHECK-MESSAGES: :[[@LINE-3]]:17: note: 'loss' comes from the call of 'compute_loss()' here
  }
  log_value(total);
}

// --- Negatives -----------------------------------------------------------------

// A loss function summing per-head terms: no backward or step, and the sums
// leave the function, directly or through values computed from them.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>
detection_loss(const std::vector<torch::Tensor> &predictions,
               const torch::Tensor &targets, const std::vector<float> &balance) {
  auto loss_box = torch::zeros({1});
  auto loss_obj = torch::zeros({1});
  auto loss_class = torch::zeros({1});
  for (size_t i = 0; i < predictions.size(); ++i) {
    auto obji = torch::nn::functional::mse_loss(
        predictions[i], targets);
    loss_obj = loss_obj + obji * balance[i];
    loss_box += torch::nn::functional::mse_loss(predictions[i], targets);
    loss_class += torch::nn::functional::mse_loss(predictions[i], targets);
  }
  return {loss_box, loss_obj, loss_class};
}

std::vector<torch::Tensor> yolo_loss(const std::vector<torch::Tensor> &predictions,
                                     const torch::Tensor &targets) {
  auto lbox = torch::zeros({1});
  auto lobj = torch::zeros({1});
  for (const auto &p : predictions) {
    lobj += torch::nn::functional::mse_loss(p, targets);
    lbox = lbox + torch::nn::functional::mse_loss(p, targets);
  }
  auto loss = lbox + lobj;
  return {loss * 2, torch::cat({lbox, lobj}).detach()};
}

std::tuple<torch::Tensor, torch::Tensor> make_tuple_loss(
    const std::vector<torch::Tensor> &predictions, const torch::Tensor &t) {
  auto sum = torch::zeros({1});
  for (const auto &p : predictions)
    sum += torch::nn::functional::mse_loss(p, t);
  return std::make_tuple(sum, sum.detach());
}

struct Losses {
  torch::Tensor total;
};

Losses struct_loss(const std::vector<torch::Tensor> &predictions,
                   const torch::Tensor &t) {
  auto total = torch::zeros({1});
  for (const auto &p : predictions)
    total += torch::nn::functional::mse_loss(p, t);
  return Losses{total};
}

void backward_of_the_sum(Net &model) {
  auto total = torch::zeros({});
  for (const auto &x : load_batches())
    total += model->forward(x).sum();
  total.backward();
}

void loss_detached_before_accumulating(Net &model, torch::optim::SGD &opt) {
  auto total = torch::zeros({});
  for (const auto &x : load_batches()) {
    auto loss = compute_loss(model, x);
    loss.backward();
    opt.step();
    total += loss.detach();
  }
  log_value(total);
}

struct Evaluator {
  std::function<torch::Tensor(torch::Tensor)> metric;
  void run() {
    auto total = torch::zeros({});
    // Nothing proves a graph: the callee is opaque and nothing runs
    // backward on its result.
    for (const auto &x : load_batches())
      total += metric(x);
    log_value(total);
  }
};

// A loss function that sums per-class terms and returns the sum, called in
// a training loop: its caller's backward() consumes the sum every step.
torch::Tensor per_class_loss(const torch::Tensor &logits, const torch::Tensor &mask,
                             int64_t classes) {
  auto probs = logits.sigmoid();
  auto total = torch::zeros({}, logits.options());
  for (int64_t c = 0; c < classes; ++c) {
    auto p = probs * c;
    auto term = (p * mask).sum() / (p.sum() + mask.sum());
    total += term;
  }
  return total / classes;
}

void train_with_a_summed_loss(torch::nn::Linear &model, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    auto x = torch::randn({2, 4});
    auto logits = model->forward(x);
    auto loss = torch::mse_loss(logits, x) + per_class_loss(logits, x, 3);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

// An exponential moving average keeps every step's graph: the accumulator
// is read inside the update, not only as its first operand.
void smoothed_loss(Net net, torch::optim::SGD &opt) {
  auto smoothed = torch::zeros({});
  auto detached = torch::zeros({});
  for (int step = 0; step < 100; ++step) {
    auto loss = net->forward(torch::randn({8, 4})).sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
    smoothed = 0.98 * smoothed + 0.02 * loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: '0.02 * loss' is still attached to its autograd graph and is accumulated into 'smoothed'{{.*}}[torch-loss-accumulation-graph]
    detached = 0.98 * detached + 0.02 * loss.detach();
  }
}

// A method that appends its argument to a member, called on every step:
// the member keeps each step's graph. Called once, after the loop: silent.
class LossLog {
public:
  void add(const torch::Tensor &loss) { values_.push_back(loss); }
  // CHECK-MESSAGES: :[[@LINE-1]]:41: warning: 'loss' is still attached to its autograd graph and is appended to member 'values_'{{.*}}[torch-loss-accumulation-graph]
  std::vector<torch::Tensor> values_;
};

void log_every_step(Net net, torch::optim::SGD &opt, LossLog &log) {
  for (int step = 0; step < 100; ++step) {
    auto loss = net->forward(torch::randn({8, 4})).sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
    log.add(loss);
  }
}

class FinalLog {
public:
  void add(const torch::Tensor &loss) { values_.push_back(loss); }
  std::vector<torch::Tensor> values_;
};

void log_last(Net net, torch::optim::SGD &opt, FinalLog &log) {
  torch::Tensor loss;
  for (int step = 0; step < 100; ++step) {
    loss = net->forward(torch::randn({8, 4})).sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  log.add(loss);
}

#include <map>
#include <string>

// A registry of running sums by name, fed the loss and a metric without a
// graph on every step: the element that holds the loss keeps its graphs.
class RunningSums {
public:
  void add(const std::string &key, const torch::Tensor &value) {
    sums_[key] += value;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' {{.*}}is still attached to its autograd graph and is accumulated into member 'sums_'{{.*}}[torch-loss-accumulation-graph]
  }

private:
  std::map<std::string, torch::Tensor> sums_;
};

void train_with_running_sums(Net &net, RunningSums &sums) {
  for (int step = 0; step < 100; ++step) {
    auto loss = net->forward(torch::randn({2, 4})).sum();
    loss.backward();
    sums.add("loss", loss);
    sums.add("norm", torch::randn({2}).sum());
  }
}

class DetachedSums {
public:
  void add(const std::string &key, const torch::Tensor &value) { sums_[key] += value; }

private:
  std::map<std::string, torch::Tensor> sums_;
};

void train_with_detached_sums(Net &net, DetachedSums &sums) {
  for (int step = 0; step < 100; ++step) {
    auto loss = net->forward(torch::randn({2, 4})).sum();
    loss.backward();
    sums.add("loss", loss.detach());
    sums.add("norm", torch::randn({2}).sum());
  }
}

// A step helper that appends to a part of the state its caller passes (by
// reference or by pointer): the caller's container, declared outside its
// loop, keeps every step's graph.
#include <memory>
struct StepLog {
  std::vector<torch::Tensor> history;
};
void log_step(Net &net, StepLog *log) {
  auto loss = net->forward(torch::randn({2, 4})).sum();
  loss.backward();
  log->history.push_back(loss);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'loss' (from 'log_step()' {{.*}}) is still attached to its autograd graph and is appended to {{.*}}[torch-loss-accumulation-graph]
}
void log_detached(Net &net, StepLog &log) {
  auto loss = net->forward(torch::randn({2, 4})).sum();
  loss.backward();
  log.history.push_back(loss.detach());
}
void train_logged(Net &net) {
  StepLog kept;
  for (int step = 0; step < 100; ++step) {
    // Near-miss: a log made inside the loop dies with the iteration.
    StepLog fresh;
    log_step(net, &fresh);
    log_detached(net, kept);
  }
  for (int step = 0; step < 100; ++step)
    log_step(net, &kept);
}

// An accumulator owned by a shared pointer that nothing copies: `*running`
// is one tensor.
void train_owned_accumulator(Net &net) {
  auto running = std::make_shared<torch::Tensor>(torch::zeros({}));
  for (int step = 0; step < 100; ++step) {
    auto loss = net->forward(torch::randn({2, 4})).sum();
    loss.backward();
    *running += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into '*running', declared outside the loop{{.*}}[torch-loss-accumulation-graph]
  }
}

// A helper that backpropagates its loss parameter reaches that argument's
// graph, not the accumulator it is also given.
void step_and_sum(torch::optim::SGD &opt, const torch::Tensor &loss,
                  torch::Tensor &sum) {
  loss.backward();
  opt.step();
  sum += loss;
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'l' (from 'step_and_sum()' {{.*}}) is still attached to its autograd graph and is accumulated into 'running'{{.*}}[torch-loss-accumulation-graph]
}
// Near-miss: a helper that backpropagates the accumulator itself (gradient
// accumulation through the sum).
void sum_then_backward(const torch::Tensor &loss, torch::Tensor &sum) {
  sum += loss;
  sum.backward();
}
// Near-miss: the caller's accumulator goes through a backward in another
// helper (the flush of an accumulation window).
void add_to(torch::Tensor &sum, const torch::Tensor &loss) { sum += loss; }
void flush(torch::optim::SGD &opt, torch::Tensor &sum) {
  sum.backward();
  opt.step();
  sum = torch::zeros({});
}
void train_with_step_helpers(Net &net, torch::optim::SGD &opt) {
  torch::Tensor running = torch::zeros({});
  torch::Tensor window = torch::zeros({});
  torch::Tensor through = torch::zeros({});
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    auto l = net->forward(torch::randn({2, 4})).sum();
    step_and_sum(opt, l, running);
    opt.zero_grad();
    sum_then_backward(net->forward(torch::randn({2, 4})).sum(), through);
    add_to(window, net->forward(torch::randn({2, 4})).sum());
    if (step % 4 == 3)
      flush(opt, window);
  }
}

// Two helpers that add to the same field of the caller's struct: each keeps
// the graphs the other added, so each finds its own earlier one.
struct EpochStats {
  torch::Tensor policy_sum;
  torch::Tensor value_sum;
};
void add_policy(EpochStats &st, const torch::Tensor &loss) {
  st.policy_sum += loss;
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'p' is still attached to its autograd graph and is accumulated into parameter 'st.policy_sum'{{.*}}[torch-loss-accumulation-graph]
}
void add_policy_bonus(EpochStats &st, const torch::Tensor &loss) {
  st.policy_sum += loss;
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: 'p' is still attached to its autograd graph and is accumulated into parameter 'st.policy_sum'{{.*}}[torch-loss-accumulation-graph]
}
// Near-miss: the second helper detaches.
void add_value(EpochStats &st, const torch::Tensor &loss) {
  st.value_sum += loss.detach();
}
void add_value_bonus(EpochStats &st, const torch::Tensor &loss) {
  st.value_sum += loss.detach();
}
void train_two_writers(Net &net, torch::optim::SGD &opt) {
  EpochStats stats{torch::zeros({}), torch::zeros({})};
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    auto p = net->forward(torch::randn({2, 4})).sum();
    p.backward();
    opt.step();
    add_policy(stats, p);
    add_policy_bonus(stats, p);
    add_value(stats, p);
    add_value_bonus(stats, p);
  }
  log_value(stats.policy_sum);
  log_value(stats.value_sum);
}

// --- std::tie into variables declared earlier ---------------------------------
// `std::tie(ms, loss) = timed_step(...)`: each variable takes its element of
// the returned tuple, the loss with its graph.
std::tuple<double, torch::Tensor> timed_step(Net &net, const torch::Tensor &x) {
  auto loss = net->forward(x).sum();
  loss.backward();
  return {1.0, loss};
}

void tied_results(Net &net, const std::vector<torch::Tensor> &batches) {
  torch::Tensor epoch_loss = torch::zeros({});
  torch::Tensor loss;
  double ms = 0;
  for (const auto &x : batches) {
    std::tie(ms, loss) = timed_step(net, x);
    epoch_loss += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' (from 'timed_step()' at {{.*}}) is still attached to its autograd graph and is accumulated into 'epoch_loss', declared outside the loop
  }
}

void tied_detached(Net &net, const std::vector<torch::Tensor> &batches) {
  torch::Tensor epoch_loss = torch::zeros({});
  torch::Tensor loss;
  double ms = 0;
  for (const auto &x : batches) {
    std::tie(ms, loss) = timed_step(net, x);
    epoch_loss += loss.detach();
  }
}

// A meter whose method adds a weighted loss to its member: the graph of
// the value its caller passes, on every step.
class RunningLoss {
public:
  void add(const torch::Tensor &loss, int64_t n) { sum_ += loss * n; }
  // CHECK-MESSAGES: :[[@LINE-1]]:52: warning: 'loss' is still attached to its autograd graph and is accumulated into member 'sum_'
  // CHECK-MESSAGES: :[[@LINE+11]]:11: note: called here, on every iteration
private:
  torch::Tensor sum_ = torch::zeros({});
};

void meter_in_the_loop(Net &net, torch::optim::Optimizer &opt,
                       const std::vector<torch::Tensor> &batches) {
  RunningLoss meter, clean;
  for (const auto &x : batches) {
    auto loss = net->forward(x).mean();
    loss.backward();
    meter.add(loss, 2);
    clean.add(loss.detach(), 2);
  }
}

// --- Accumulators that outlive the function: globals, hooks' captures -------

torch::Tensor g_epoch_loss;
void track_global(const torch::Tensor &loss) { g_epoch_loss += loss; }
// CHECK-MESSAGES: :[[@LINE-1]]:48: warning: 'loss' is still attached to its autograd graph and is accumulated into global 'g_epoch_loss'
// CHECK-MESSAGES: :[[@LINE+10]]:5: note: called here, on every iteration
void track_global_item(const torch::Tensor &loss) { g_epoch_loss += loss.detach(); }

// (A call of an unknown function may change any global: the layer here is
// the library's.)
void global_meter(const std::vector<torch::Tensor> &batches) {
  torch::nn::Linear fc(4, 1);
  for (const auto &x : batches) {
    auto loss = fc(x).mean();
    loss.backward();
    track_global(loss);
    track_global_item(loss);
  }
}

// A registry of named hooks, run after every step of another function's
// loop: the captured accumulator is main's, and outlives that loop.
struct StepInfo {
  int64_t step = 0;
  torch::Tensor loss;
};
class HookedTrainer {
public:
  void on(const std::string &name, std::function<void(StepInfo &)> hook) {
    hooks_[name] = std::move(hook);
  }
  void fit(Net &net, const std::vector<torch::Tensor> &batches) {
    StepInfo info;
    for (const auto &x : batches) {
      auto loss = net->forward(x).mean();
      loss.backward();
      info.loss = loss;
      for (auto &entry : hooks_)
        entry.second(info);
    }
  }
private:
  std::map<std::string, std::function<void(StepInfo &)>> hooks_;
};

void run_with_hooks(Net &net, const std::vector<torch::Tensor> &batches) {
  HookedTrainer trainer;
  auto total = torch::zeros({});
  double seen = 0;
  trainer.on("sum", [&total](StepInfo &s) { total += s.loss; });
  // CHECK-MESSAGES: :[[@LINE-1]]:45: warning: 's.loss' is still attached to its autograd graph and is accumulated into 'total', declared outside the loop
  // CHECK-MESSAGES: :[[@LINE-13]]:9: note: called here, on every iteration
  auto clean = torch::zeros({});
  trainer.on("clean", [&clean](StepInfo &s) { clean += s.loss.detach(); });
  trainer.on("count", [&seen](StepInfo &s) { seen += s.loss.item<double>(); });
  trainer.fit(net, batches);
  log_value(total + clean);
}

// A helper's result computed from two of its parameters has a graph when
// either argument has one.
torch::Tensor weighted_error(const torch::Tensor &pred, const torch::Tensor &weight) {
  return (pred * weight).mean();
}

void two_parameter_helper(Net &net, const std::vector<torch::Tensor> &batches) {
  auto total = torch::zeros({});
  auto baseline = torch::zeros({});
  for (const auto &x : batches) {
    auto out = net->forward(x);
    auto w = torch::rand({8, 1});
    auto loss = weighted_error(out, w);
    loss.backward();
    auto logged = weighted_error(out, w);
    total += logged;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'logged' is still attached to its autograd graph and is accumulated into 'total', declared outside the loop
    baseline += weighted_error(x, w);
  }
  log_value(total + baseline);
}

// A virtual hook called through a member pointer runs on the hook, not on
// the trainer: the trainer's accumulators keep what they hold.
struct VirtualStepHook {
  virtual ~VirtualStepHook() = default;
  virtual void on_step(const torch::Tensor &) {}
};
struct CountingStepHook : VirtualStepHook {
  int calls = 0;
  void on_step(const torch::Tensor &) override { ++calls; }
};
class VirtualHookTrainer {
public:
  VirtualHookTrainer() : hook_(std::make_unique<CountingStepHook>()) {}
  void fit(torch::optim::Optimizer &opt) {
    for (int s = 0; s < 100; ++s) {
      opt.zero_grad();
      auto loss = net_->forward(torch::randn({2, 4})).mean();
      loss.backward();
      opt.step();
      hook_->on_step(loss);
      epoch_loss_ += loss;
      // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'loss' is still attached to its autograd graph and is accumulated into member 'epoch_loss_'
    }
  }

private:
  Net net_;
  std::unique_ptr<VirtualStepHook> hook_;
  torch::Tensor epoch_loss_ = torch::zeros({});
};
