// RUN: %check_torch_tidy %s torch-autocast-region %t

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <stdexcept>

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);
torch::Tensor batch();
torch::Tensor labels();

// An early return leaves the region on.
torch::Tensor predict(Net &net, const torch::Tensor &x, bool raw) {
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: autocast switched on here stays on when the function returns below{{.*}}[torch-autocast-region]
  auto y = net->forward(x);
  if (raw)
    return y;
  // CHECK-MESSAGES: :[[@LINE-1]]:5: note: the function returns here with autocast on
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  return y.relu();
}
// A throw leaves it on; one caught in the function does not leave.
torch::Tensor checked(Net &net, const torch::Tensor &x) {
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: autocast switched on here stays on when the function throws below
  try {
    if (x.numel() == 0)
      throw std::invalid_argument("empty");
  } catch (const std::invalid_argument &) {
  }
  auto y = net->forward(x);
  if (!y.defined())
    throw std::runtime_error("no output");
  // CHECK-MESSAGES: :[[@LINE-1]]:5: note: the function throws here with autocast on
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  return y;
}
// Restored to a saved state on every path: silent.
torch::Tensor restored(Net &net, const torch::Tensor &x, bool raw) {
  bool was = at::autocast::is_autocast_enabled(at::kCUDA);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  auto y = net->forward(x);
  at::autocast::set_autocast_enabled(at::kCUDA, was);
  if (raw)
    return y;
  return y.relu();
}
// A helper that only switches it on means to leave it on.
void enable_amp() { at::autocast::set_autocast_enabled(at::kCUDA, true); }

// backward() inside the region.
void backward_inside(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() runs inside an autocast region
    // CHECK-MESSAGES: :[[@LINE-4]]:5: note: autocast is switched on here
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    opt.step();
  }
}
// float16 (CUDA's default) and no loss scaling.
void unscaled_half(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a loss computed in a float16 autocast region with no loss scaling
    // CHECK-MESSAGES: :[[@LINE-5]]:5: note: the float16 region that computed the loss starts here
    opt.step();
  }
}
// Scaled by hand: silent.
void scaled_half(Net &net, torch::optim::Optimizer &opt) {
  const double scale = 1024.0;
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    (loss * scale).backward();
    for (auto &p : net->parameters())
      p.mutable_grad().div_(scale);
    opt.step();
  }
}
// bfloat16: silent.
void bfloat16(Net &net, torch::optim::Optimizer &opt) {
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    loss.backward();
    opt.step();
  }
}
// An RAII guard of the project's own: its constructor and destructor say
// what it does.
struct AutocastScope {
  AutocastScope() : was_(at::autocast::is_autocast_enabled(at::kCUDA)) {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
  }
  ~AutocastScope() { at::autocast::set_autocast_enabled(at::kCUDA, was_); }
  bool was_;
};
torch::Tensor guarded(Net &net, const torch::Tensor &x, bool raw) {
  AutocastScope scope;
  auto y = net->forward(x);
  if (raw)
    return y;
  return y.relu();
}
void guarded_backward(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    AutocastScope scope;
    net->forward(batch()).mean().backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:34: warning: backward() runs inside an autocast region
    // CHECK-MESSAGES: :[[@LINE-3]]:19: note: autocast is switched on here
    opt.step();
  }
}
// A backward() in a helper called inside the caller's region.
void backward_of(const torch::Tensor &loss) { loss.backward(); }
// CHECK-MESSAGES: :[[@LINE-1]]:52: warning: backward() runs inside an autocast region
void region_around_helper(Net &net) {
  enable_amp();
  backward_of(net->forward(batch()).sum());
  // CHECK-MESSAGES: :[[@LINE-1]]:3: note: called here
  // CHECK-MESSAGES: :[[@LINE-3]]:3: note: autocast is switched on here
  at::autocast::set_autocast_enabled(at::kCUDA, false);
}
// A guard held as a member of a scope object: the compiler's constructor
// and destructor run the guard's.
struct UpdateScope {
  AutocastScope amp;
  int updates = 0;
  ~UpdateScope() { ++updates; }
};
void member_guard(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      UpdateScope scope;
      loss = net->forward(batch()).sum();
      loss.backward();
      // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: backward() runs inside an autocast region
      // CHECK-MESSAGES: :[[@LINE-4]]:19: note: autocast is switched on here
    }
    (loss * 2).backward(); // after the scope: off again
    opt.step();
  }
}

// One switch for both directions: a helper that passes its bool parameter
// on. Each call does what its argument says.
namespace amp {
void enable(bool on) { at::autocast::set_autocast_enabled(at::kCUDA, on); }
void enable_if(bool on) { enable(on); }
} // namespace amp

void unscaled_half_through_switch(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    amp::enable(true);
    auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels());
    amp::enable(false);
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a loss computed in a float16 autocast region with no loss scaling
    opt.step();
  }
}

void backward_inside_nested_switch(Net &net, torch::optim::Optimizer &opt) {
  amp::enable_if(true);
  auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels()) * 1024.0;
  loss.backward();
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: backward() runs inside an autocast region
  amp::enable_if(false);
  opt.step();
}

// Switched off by the helper: the region is closed before backward().
void switch_off_before_backward(Net &net, torch::optim::Optimizer &opt) {
  amp::enable(true);
  auto loss = torch::nn::functional::cross_entropy(net->forward(batch()), labels()) * 1024.0;
  amp::enable(false);
  loss.backward();
  opt.step();
}

// A helper that throws on some path leaves the function with the region on.
void check_batch(const torch::Tensor &x) {
  if (x.numel() == 0)
    throw std::length_error("empty batch");
}

torch::Tensor forward_checked(Net &net, const torch::Tensor &x) {
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: autocast switched on here stays on when the function throws through a call below
  check_batch(x);
  auto y = net->forward(x);
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  return y;
}

// So does a constructor that throws on some path.
struct CheckedBatch {
  explicit CheckedBatch(const torch::Tensor &x) : x(x) {
    if (x.numel() == 0)
      throw std::length_error("empty batch");
  }
  torch::Tensor x;
};
torch::Tensor forward_constructed(Net &net, const torch::Tensor &raw) {
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  // CHECK-MESSAGES: :[[@LINE-1]]:3: warning: autocast switched on here stays on when the function throws through a call below
  const CheckedBatch batch(raw);
  auto y = net->forward(batch.x);
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  return y;
}

// Checked before the region opens: nothing leaves with it on.
torch::Tensor forward_checked_first(Net &net, const torch::Tensor &x) {
  check_batch(x);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  auto y = net->forward(x);
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  return y;
}
// A guard owned by a std::unique_ptr: reset() and the pointer's scope end
// run its destructor, which restores autocast.
void owned_guard_released(Net &net, torch::optim::Optimizer &opt, bool amp) {
  for (int i = 0; i < 10; ++i) {
    std::unique_ptr<AutocastScope> scope;
    if (amp)
      scope = std::make_unique<AutocastScope>();
    auto loss = net->forward(batch()).mean();
    scope.reset();
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a loss computed in a float16 autocast region with no loss scaling
    // CHECK-MESSAGES: :[[@LINE-5]]:15: note: the float16 region that computed the loss starts here
    opt.step();
  }
}
void owned_guard_held(Net &net, torch::optim::Optimizer &opt) {
  for (int i = 0; i < 10; ++i) {
    auto scope = std::make_unique<AutocastScope>();
    net->forward(batch()).mean().backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:34: warning: backward() runs inside an autocast region
    // CHECK-MESSAGES: :[[@LINE-3]]:18: note: autocast is switched on here
    opt.step();
  }
}
void after_owned_guard(Net &net, torch::optim::Optimizer &opt) {
  {
    auto scope = std::make_unique<AutocastScope>();
    net->forward(batch());
  }
  net->forward(batch()).mean().backward();
}

// A helper that switches to bfloat16 and back to float16 inside its loop:
// on every path it leaves float16, whether the loop ran or not.
void polish_bf16(Net &net, torch::optim::Optimizer &opt, int steps) {
  for (int i = 0; i < steps; ++i) {
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    auto loss = net->forward(batch()).mean();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kHalf);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}
void half_after_polish(Net &net, torch::optim::Optimizer &opt, int steps) {
  polish_bf16(net, opt, steps);
  opt.zero_grad();
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  auto loss = net->forward(batch()).mean();
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  loss.backward();
  // CHECK-MESSAGES: :[[@LINE-1]]:8: warning: backward() of a loss computed in a float16 autocast region with no loss scaling
  // CHECK-MESSAGES: :[[@LINE-5]]:3: note: the float16 region that computed the loss starts here
  opt.step();
}
// One that may leave bfloat16 set: the dtype after it is not known.
void maybe_bf16(bool low) {
  if (low)
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
}
void after_maybe_bf16(Net &net, torch::optim::Optimizer &opt, bool low) {
  maybe_bf16(low);
  opt.zero_grad();
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  auto loss = net->forward(batch()).mean();
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  loss.backward();
  opt.step();
}

// A loss from a virtual call: what the overrides the TU defines return (both
// mean losses here), in the base class's float16 region.
class VirtualLossTrainer {
public:
  virtual ~VirtualLossTrainer() = default;
  void step(torch::optim::Optimizer &opt) {
    opt.zero_grad();
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    auto loss = forward_loss();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a loss computed in a float16 autocast region with no loss scaling
    // CHECK-MESSAGES: :[[@LINE-5]]:5: note: the float16 region that computed the loss starts here
    opt.step();
  }

protected:
  virtual torch::Tensor forward_loss() = 0;
  Net net_;
};
class MeanLossTrainer : public VirtualLossTrainer {
  torch::Tensor forward_loss() override { return net_->forward(batch()).mean(); }
};
class SquaredLossTrainer : public VirtualLossTrainer {
  torch::Tensor forward_loss() override {
    return net_->forward(batch()).pow(2).mean();
  }
};

// A weighted sum of float16 losses is one: a weight of at most one scales
// nothing back up; a factor that may be large may be a loss scale.
torch::Tensor reconstruction(const torch::Tensor &out) { return out.pow(2).mean(); }
void weighted_sum(Net &net, torch::optim::Optimizer &opt, double scale) {
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    auto out = net->forward(batch());
    auto loss = reconstruction(out) + 0.1 * out.abs().mean();
    auto scaled = loss * scale;
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a loss computed in a float16 autocast region with no loss scaling
    // CHECK-MESSAGES: :[[@LINE-7]]:5: note: the float16 region that computed the loss starts here
    scaled.backward();
    opt.step();
  }
}
