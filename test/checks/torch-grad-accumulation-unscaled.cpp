// RUN: %check_torch_tidy %s torch-grad-accumulation-unscaled %t

#include <torch/torch.h>
#include <functional>
#include <utility>
struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);
torch::Tensor batch();
torch::Tensor labels();
// Steps every 8 calls.
void step_when_ready(torch::optim::Optimizer &opt, int &micro) {
  if (++micro % 8 == 0) {
    opt.step();
    opt.zero_grad();
  }
}

// A mean loss, step() every 4 iterations: the update is 4 times too large.
void unscaled(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 100; ++i) {
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a mean loss adds its gradients over several iterations before one step(){{.*}}[torch-grad-accumulation-unscaled]
    if ((i + 1) % 4 == 0) {
      opt.step();
      // CHECK-MESSAGES: :[[@LINE-1]]:11: note: the step() runs only on some iterations
      opt.zero_grad();
    }
  }
}
void scaled(Net &net, torch::optim::Optimizer &opt, int accum) {
  for (int i = 0; i < 100; ++i) {
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
    (loss / accum).backward();
    if ((i + 1) % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}
void scaled_in_place(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 100; ++i) {
    auto loss = net->forward(batch()).mean();
    loss /= 8;
    loss.backward();
    if (i % 8 == 7) {
      opt.step();
      opt.zero_grad();
    }
  }
}
// A sum-reduced loss accumulates as it should.
void summed(Net &net, torch::optim::Optimizer &opt) {
  torch::nn::CrossEntropyLoss criterion(
      torch::nn::CrossEntropyLossOptions().reduction(torch::kSum));
  for (int i = 0; i < 100; ++i) {
    criterion(net->forward(batch()), labels()).backward();
    if (i % 4 == 3) {
      opt.step();
      opt.zero_grad();
    }
  }
}
// The default loss module reduces to the mean; so does a sum of two means.
void module_loss(Net &net, torch::optim::Optimizer &opt, int steps) {
  torch::nn::CrossEntropyLoss criterion;
  torch::nn::MSELoss aux(torch::nn::MSELossOptions().reduction(torch::kMean));
  for (int step = 0; step < steps; ++step) {
    auto out = net->forward(batch());
    auto loss = criterion(out, labels()) + aux(out, batch());
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a mean loss
    if (step % 2 == 1) {
      opt.step();
      // CHECK-MESSAGES: :[[@LINE-1]]:11: note: the step() runs
      net->zero_grad();
    }
  }
}
// The gradients rescaled before the step.
void rescaled(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 100; ++i) {
    net->forward(batch()).mean().backward();
    if (i % 4 == 3) {
      for (auto &p : net->parameters())
        p.mutable_grad().div_(4);
      opt.step();
      opt.zero_grad();
    }
  }
}
// A step on every iteration: nothing accumulates.
void every_step(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 100; ++i) {
    opt.zero_grad();
    net->forward(batch()).mean().backward();
    opt.step();
  }
}
// Two losses of one step (a discriminator's real and fake halves).
void two_halves(Net &d, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 100; ++i) {
    opt.zero_grad();
    torch::mse_loss(d->forward(batch()), labels()).backward();
    torch::mse_loss(d->forward(batch()), labels()).backward();
    opt.step();
  }
}
// The backward() in a helper the loop calls; the step in another.
void backward_of(Net &net) {
  torch::nn::functional::mse_loss(net->forward(batch()), labels()).backward();
  // CHECK-MESSAGES: :[[@LINE-1]]:68: warning: backward() of a mean loss
}
void apply(torch::optim::Optimizer &opt) {
  opt.step();
  opt.zero_grad();
}
void helpers(Net &net, torch::optim::Optimizer &opt, int64_t every) {
  for (int64_t i = 0; i < 100; ++i) {
    backward_of(net);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: note: called here
    if ((i + 1) % every == 0)
      apply(opt);
      // CHECK-MESSAGES: :[[@LINE-1]]:7: note: the step() runs
  }
}
// Handed to a function whose body is unknown: it may step.
void opaque_update(torch::optim::Optimizer &opt);
void escapes(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 100; ++i) {
    net->forward(batch()).mean().backward();
    opaque_update(opt);
  }
}
// No step in the loop: gradients computed for another use.
void no_step(Net &net) {
  for (int i = 0; i < 100; ++i)
    net->forward(batch()).mean().backward();
}

// A finished training run that rescales its own gradients says nothing of
// the accumulation that follows it.
void pretrain_rescaled(Net &net, torch::optim::Optimizer &opt, double scale) {
  for (int i = 0; i < 10; ++i) {
    (net->forward(batch()).mean() * scale).backward();
    for (auto &p : net->parameters())
      p.grad().div_(scale);
    opt.step();
    opt.zero_grad();
  }
}
void accumulate_after_pretraining(Net &net, torch::optim::Optimizer &opt) {
  pretrain_rescaled(net, opt, 1024.0);
  for (int i = 0; i < 100; ++i) {
    auto loss = net->forward(batch()).mean();
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a mean loss adds its gradients over several iterations before one step(){{.*}}[torch-grad-accumulation-unscaled]
    if ((i + 1) % 4 == 0) {
      opt.step();
      // CHECK-MESSAGES: :[[@LINE-1]]:11: note: the step() runs only on some iterations
      opt.zero_grad();
    }
  }
}

// A per-step helper that rescales the gradients before it steps.
void rescale_and_step(Net &net, torch::optim::Optimizer &opt) {
  for (auto &p : net->parameters())
    p.grad().div_(4);
  opt.step();
  opt.zero_grad();
}
void accumulate_with_rescaling_helper(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 100; ++i) {
    net->forward(batch()).mean().backward();
    if ((i + 1) % 4 == 0)
      rescale_and_step(net, opt);
  }
}

// Accumulation is a step under a branch on a counter. An iteration skipped
// after its backward() (`if (!ok) continue;`, a helper whose loss may be
// undefined) is no accumulation by design: that is missing-zero-grad's.
std::pair<torch::Tensor, bool> step_loss(Net &net, bool skip) {
  if (skip)
    return {torch::Tensor(), false};
  auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
  loss.backward();
  return {loss, true};
}
void skipped_iterations(Net &net, torch::optim::Optimizer &opt, bool (*usable)()) {
  for (int i = 0; i < 100; ++i) {
    auto [loss, ok] = step_loss(net, i == 7);
    if (!loss.defined())
      continue;
    if (!usable())
      continue;
    opt.step();
    opt.zero_grad();
  }
}
void counted_in_a_helper(Net &net, torch::optim::Optimizer &opt, int &micro) {
  for (int i = 0; i < 100; ++i) {
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a mean loss adds its gradients over several iterations before one step(){{.*}}[torch-grad-accumulation-unscaled]
    step_when_ready(opt, micro);
  }
}

// The counter in a predicate the loop branches on.
struct Accumulator {
  int every = 4, seen = 0;
  bool boundary() { return ++seen % every == 0; }
};
void counted_in_a_predicate(Net &net, torch::optim::Optimizer &opt, Accumulator &acc) {
  for (int i = 0; i < 100; ++i) {
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a mean loss adds its gradients over several iterations before one step(){{.*}}[torch-grad-accumulation-unscaled]
    if (acc.boundary()) {
      opt.step();
      opt.zero_grad();
    }
  }
}

// A helper that divides (or multiplies) the loss returns no plain mean loss,
// whatever its caller's loss was.
torch::Tensor scaled(const torch::Tensor &loss, int n) { return loss / n; }
torch::Tensor halved(const torch::Tensor &loss) { return loss.div(2); }
void scaled_by_a_helper(Net &net, torch::optim::Optimizer &opt, int accum) {
  for (int i = 0; i < 100; ++i) {
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
    scaled(loss, accum).backward();
    if ((i + 1) % accum == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}
void halved_by_a_helper(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 100; ++i) {
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
    halved(loss).backward();
    if ((i + 1) % 2 == 0) {
      opt.step();
      opt.zero_grad();
    }
  }
}

// A step gated by a predicate every caller writes as a lambda on the
// counter: accumulation, as a `% N` in place would be.
void step_when(Net &net, torch::optim::SGD &opt,
               const std::function<bool(int64_t)> &should_step) {
  for (int64_t i = 0; i < 100; ++i) {
    auto loss = net->forward(torch::rand({8, 4})).mean();
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a mean loss adds its gradients over several iterations
    if (should_step(i)) {
      opt.step();
      // CHECK-MESSAGES: :[[@LINE-1]]:11: note: the step() runs only on some iterations
      opt.zero_grad();
    }
  }
}

void step_every_four(Net &net, torch::optim::SGD &opt) {
  step_when(net, opt, [](int64_t i) { return (i + 1) % 4 == 0; });
}

// A criterion chosen on either branch of a constructor: both reduce by the
// mean, so does what the member returns.
class CriterionTrainer {
public:
  CriterionTrainer(Net net, bool l1) : net_(net) {
    if (l1)
      criterion_ = [](const torch::Tensor &a, const torch::Tensor &b) {
        return torch::l1_loss(a, b);
      };
    else
      criterion_ = [](const torch::Tensor &a, const torch::Tensor &b) {
        return torch::mse_loss(a, b);
      };
  }
  void run(torch::optim::SGD &opt) {
    for (int64_t i = 0; i < 100; ++i) {
      auto x = torch::rand({8, 4});
      auto loss = criterion_(net_->forward(x), x);
      loss.backward();
      // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: backward() of a mean loss adds its gradients over several iterations
      if ((i + 1) % 4 == 0) {
        opt.step();
        // CHECK-MESSAGES: :[[@LINE-1]]:13: note: the step() runs only on some iterations
        opt.zero_grad();
      }
    }
  }

private:
  Net net_;
  std::function<torch::Tensor(const torch::Tensor &, const torch::Tensor &)> criterion_;
};
