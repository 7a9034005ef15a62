// RUN: %check_torch_tidy %s torch-missing-zero-grad %t

#include <torch/torch.h>
#include <algorithm>
#include <functional>
struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);
torch::Tensor batch();

void no_reset(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    auto loss = net->forward(batch()).mean();
    loss.backward();
    opt.step();
    // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: optimizer step() with no gradient reset before the next backward(){{.*}}[torch-missing-zero-grad]
    // CHECK-MESSAGES: :[[@LINE-3]]:10: note: the next backward() adds to the gradients that step applied
  }
}
void reset_first(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    auto loss = net->forward(batch()).mean();
    loss.backward();
    opt.step();
  }
}
void reset_after(Net &net, torch::optim::SGD &opt) {
  for (int i = 0; i < 10; ++i) {
    auto loss = net->forward(batch()).mean();
    loss.backward();
    opt.step();
    net->zero_grad();
  }
}
// Gradient accumulation: step() and zero_grad() under one condition.
void accumulate_right(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    auto loss = net->forward(batch()).mean() / 4;
    loss.backward();
    if ((i + 1) % 4 == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}
void accumulate_wrong(Net &net, torch::optim::Optimizer &opt) {
  opt.zero_grad();
  for (int i = 0; i < 10; ++i) {
    auto loss = net->forward(batch()).mean() / 4;
    loss.backward();
    if ((i + 1) % 4 == 0)
      opt.step();
      // CHECK-MESSAGES: :[[@LINE-1]]:11: warning: optimizer step() with no gradient reset
      // CHECK-MESSAGES: :[[@LINE-4]]:10: note: the next backward() adds to the gradients that step applied
  }
}
void step_helper(torch::optim::Optimizer &opt) { opt.step(); }
void zero_helper(torch::optim::Optimizer &opt) { opt.zero_grad(); }
void via_helpers(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    zero_helper(opt);
    net->forward(batch()).mean().backward();
    step_helper(opt);
  }
}
void via_helpers_bug(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    net->forward(batch()).mean().backward();
    step_helper(opt);
    // CHECK-MESSAGES: :[[@LINE-13]]:54: warning: optimizer step() with no gradient reset
    // CHECK-MESSAGES: :[[@LINE-2]]:5: note: the step is left by this call
    // CHECK-MESSAGES: :[[@LINE-4]]:34: note: the next backward() adds
  }
}
void backward_helper(Net &net) { net->forward(batch()).mean().backward(); }
void backward_in_callee(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    backward_helper(net);
    opt.step();
    // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: optimizer step() with no gradient reset
    // CHECK-MESSAGES: :[[@LINE-3]]:5: note: which calls backward() here
    // CHECK-MESSAGES: :[[@LINE-7]]:63: note: the next backward() adds
  }
}
// Handed to a function whose body is unknown: it may reset them.
void opaque(torch::optim::Optimizer &opt);
void escapes(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    net->forward(batch()).mean().backward();
    opt.step();
    opaque(opt);
  }
}
// Any reset counts: each network's before its own backward().
void gan(Net &g, Net &d, torch::optim::Optimizer &gopt, torch::optim::Optimizer &dopt) {
  for (int i = 0; i < 10; ++i) {
    dopt.zero_grad();
    d->forward(batch()).mean().backward();
    dopt.step();
    gopt.zero_grad();
    d->forward(g->forward(batch())).mean().backward();
    gopt.step();
  }
}
// A reset loop over the parameters counts, as if it ran at least once.
void manual_reset(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    net->forward(batch()).mean().backward();
    opt.step();
    for (auto &p : net->parameters())
      p.mutable_grad().reset();
  }
}
// The update in a std::function that captures the optimizer: its step
// outlives the lambda's call.
void function_update(Net &net, torch::optim::Optimizer &opt) {
  std::function<void()> update = [&] {
    opt.step();
    // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: optimizer step() with no gradient reset
  };
  for (int i = 0; i < 10; ++i) {
    net->forward(batch()).mean().backward();
    update();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: note: the step is left by this call
    // CHECK-MESSAGES: :[[@LINE-3]]:34: note: the next backward() adds
  }
}
// A local optimizer's steps end with its function.
void fine_tune_head(Net &net) {
  torch::optim::SGD head(net->parameters(), 0.1);
  for (int i = 0; i < 10; ++i) {
    head.zero_grad();
    net->forward(batch()).mean().backward();
    head.step();
  }
}
void sweep(Net &net) {
  for (int trial = 0; trial < 4; ++trial) {
    fine_tune_head(net);
    net->forward(batch()).mean().backward();
  }
}

// Hooks the callers registered, of unknown contents: they may reset an
// optimizer they can reach (the caller's), not one private to the loop.
struct StepHooks {
  std::vector<std::function<void()>> on_step_end;
};

void hooks_may_reset_callers_optimizer(Net &net, torch::optim::Optimizer &opt,
                                       const StepHooks &hooks,
                                       torch::Tensor x) {
  for (int i = 0; i < 10; ++i) {
    net->forward(x).sum().backward();
    opt.step();
    for (const auto &hook : hooks.on_step_end)
      hook();
  }
}

void hooks_cannot_reach_private_optimizer(Net &net, const StepHooks &hooks,
                                          torch::Tensor x) {
  torch::optim::SGD opt(net->parameters(), 0.1);
  for (int i = 0; i < 10; ++i) {
    net->forward(x).sum().backward();
    opt.step();
    // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: optimizer step() with no gradient reset before the next backward()
    for (const auto &hook : hooks.on_step_end)
      hook();
  }
}

// A trainer hierarchy: the base's loop calls a virtual step; each override
// the TU defines may run there.
struct TrainerBase {
  virtual ~TrainerBase() = default;
  virtual void train_step(torch::Tensor x) = 0;
  void fit(torch::optim::Optimizer &opt, torch::Tensor x) {
    opt.zero_grad();
    for (int i = 0; i < 10; ++i)
      train_step(x);
  }
};

struct PlainTrainer : TrainerBase {
  PlainTrainer(Net n, torch::optim::Optimizer &o) : net(n), opt(o) {}
  void train_step(torch::Tensor x) override {
    net->forward(x).sum().backward();
    opt.step();
    // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: optimizer step() with no gradient reset before the next backward()
  }
  Net net;
  torch::optim::Optimizer &opt;
};

struct ResettingTrainer : TrainerBase {
  ResettingTrainer(Net n, torch::optim::Optimizer &o) : net(n), opt(o) {}
  void train_step(torch::Tensor x) override {
    opt.zero_grad();
    net->forward(x).sum().backward();
    opt.step();
  }
  Net net;
  torch::optim::Optimizer &opt;
};

// Each step of the function that reaches the next backward() without a
// reset is its own warning: a warm-up loop that resets, then a loop that
// does not.
void warmup_then_train(Net &net, torch::optim::Optimizer &opt, int phases) {
  for (int phase = 0; phase < phases; ++phase) {
    if (phase == 0) {
      for (int i = 0; i < 5; ++i) {
        opt.zero_grad();
        net->forward(torch::randn({2, 4})).sum().backward();
        opt.step();
        // CHECK-MESSAGES: :[[@LINE-1]]:13: warning: optimizer step() with no gradient reset before the next backward()
      }
    } else {
      for (int i = 0; i < 5; ++i) {
        net->forward(torch::randn({2, 4})).sum().backward();
        opt.step();
        // CHECK-MESSAGES: :[[@LINE-1]]:13: warning: optimizer step() with no gradient reset before the next backward()
      }
    }
  }
}

// One object, one dynamic type: what a virtual call left on the last
// iteration is the same override's. The resetting override is silent; the
// other is flagged at its own step.
struct LearnerBase {
  virtual ~LearnerBase() = default;
  virtual void learn(torch::Tensor x) = 0;
  void fit(torch::Tensor x) {
    for (int i = 0; i < 10; ++i)
      learn(x);
  }
};

struct CarefulLearner : LearnerBase {
  CarefulLearner(Net n, torch::optim::Optimizer &o) : net(n), opt(o) {}
  void learn(torch::Tensor x) override {
    opt.zero_grad();
    net->forward(x).sum().backward();
    opt.step();
  }
  Net net;
  torch::optim::Optimizer &opt;
};

struct CarelessLearner : LearnerBase {
  CarelessLearner(Net n, torch::optim::Optimizer &o) : net(n), opt(o) {}
  void learn(torch::Tensor x) override {
    net->forward(x).sum().backward();
    opt.step();
    // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: optimizer step() with no gradient reset before the next backward()
  }
  Net net;
  torch::optim::Optimizer &opt;
};

// Each gradient replaced by an undefined tensor (set to none) is a reset.
void gradients_set_to_none(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    net->forward(batch()).mean().backward();
    opt.step();
    for (auto &p : net->parameters())
      p.mutable_grad() = torch::Tensor();
  }
}

// A local object whose destructor resets the gradients, at the end of each
// iteration.
struct ResetOnExit {
  explicit ResetOnExit(Net n) : net(std::move(n)) {}
  ~ResetOnExit() { net->zero_grad(); }
  Net net;
};

void reset_by_a_destructor(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    ResetOnExit reset(net);
    net->forward(batch()).mean().backward();
    opt.step();
  }
}

// Two trainers fitted one after the other: the first one's last step and
// the second one's first backward() share no iteration.
class StepThenReset {
public:
  explicit StepThenReset(Net n) : net_(n), opt_(net_->parameters(), 0.1) {}
  void fit() {
    for (int i = 0; i < 10; ++i) {
      opt_.zero_grad();
      net_->forward(batch()).mean().backward();
      opt_.step();
    }
  }

private:
  Net net_;
  torch::optim::SGD opt_;
};

void two_trainers() {
  Net a, b;
  StepThenReset first(a), second(b);
  first.fit();
  second.fit();
}

// std::for_each over the parameters runs its lambda on each of them, as a
// loop over them does: a lambda that drops each gradient resets them.
void drop_grads(Net &net) {
  auto params = net->parameters();
  std::for_each(params.begin(), params.end(),
                [](torch::Tensor &p) { p.mutable_grad() = torch::Tensor(); });
}
void fit_with_for_each_reset(Net &net, torch::optim::SGD &opt) {
  for (int i = 0; i < 3; ++i) {
    drop_grads(net);
    net->forward(torch::ones({4})).mean().backward();
    opt.step();
  }
}
// One that only reads them resets nothing.
void fit_with_for_each_norms(Net &net, torch::optim::SGD &opt) {
  for (int i = 0; i < 3; ++i) {
    auto params = net->parameters();
    double norm = 0;
    std::for_each(params.begin(), params.end(),
                  [&norm](const torch::Tensor &p) { norm += p.sum().item<double>(); });
    net->forward(torch::ones({4})).mean().backward();
    opt.step();
    // CHECK-MESSAGES: :[[@LINE-1]]:9: warning: optimizer step() with no gradient reset before the next backward()
  }
}
