// RUN: %check_torch_tidy %s torch-autocast-region %t

// Autocast switched by the project's own objects: the dtype and the mode are
// scalars an object holds (set by its constructor or an initialiser list),
// and its methods open and close the region.

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <optional>
#include <stdexcept>

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);
torch::Tensor batch();

// Built with the dtype a run wants; not a guard.
class AmpSwitch {
public:
  explicit AmpSwitch(at::ScalarType dtype) : dtype_(dtype) {}
  void enter() {
    at::autocast::set_autocast_dtype(at::kCUDA, dtype_);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
  }
  void exit() { at::autocast::set_autocast_enabled(at::kCUDA, false); }

private:
  at::ScalarType dtype_;
};

// main() hands it the float16 switch: the loss reaches backward() unscaled.
void calibrate(Net &net, AmpSwitch &fp16, torch::optim::Optimizer &opt) {
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    fp16.enter();
    auto loss = net->forward(batch()).mean();
    fp16.exit();
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a loss computed in a float16 autocast region with no loss scaling
    // CHECK-MESSAGES: :[[@LINE-5]]:10: note: the float16 region that computed the loss starts here
    opt.step();
  }
}

// main() hands it the bfloat16 switch: no scaling needed.
void finetune(Net &net, AmpSwitch &bf16, torch::optim::Optimizer &opt) {
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    bf16.enter();
    auto loss = net->forward(batch()).mean();
    bf16.exit();
    loss.backward();
    opt.step();
  }
}

// The throw skips exit(): the thread stays in autocast.
torch::Tensor score(Net &net, AmpSwitch &amp, const torch::Tensor &x) {
  torch::NoGradGuard no_grad;
  amp.enter();
  // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: autocast switched on here stays on when the function throws below
  auto y = net->forward(x);
  if (y.sum().item<double>() < 0)
    throw std::runtime_error("negative score");
  // CHECK-MESSAGES: :[[@LINE-1]]:5: note: the function throws here with autocast on
  amp.exit();
  return y;
}

// Closed on every path: silent.
torch::Tensor score_closed(Net &net, AmpSwitch &amp, const torch::Tensor &x) {
  torch::NoGradGuard no_grad;
  amp.enter();
  auto y = net->forward(x);
  amp.exit();
  if (y.sum().item<double>() < 0)
    throw std::runtime_error("negative score");
  return y;
}

// A mode enum in an aggregate, set by the trainer's initialiser list.
enum class AmpMode { Off, Fp16, Bf16 };
struct AmpContext {
  AmpMode mode = AmpMode::Off;
  void enter() {
    switch (mode) {
    case AmpMode::Off:
      return;
    case AmpMode::Fp16:
      at::autocast::set_autocast_dtype(at::kCUDA, at::kHalf);
      break;
    case AmpMode::Bf16:
      at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
      break;
    }
    at::autocast::set_autocast_enabled(at::kCUDA, true);
  }
  void exit() { at::autocast::set_autocast_enabled(at::kCUDA, false); }
};
struct TunerConfig {
  AmpMode amp = AmpMode::Bf16;
  double scale = 1024.0;
};

class Tuner {
public:
  Tuner(Net net, const TunerConfig &cfg)
      : net_(net), ctx_{cfg.amp}, scale_(cfg.scale),
        opt_(net_->parameters(), torch::optim::SGDOptions(0.1)) {}
  // Every caller configures float16: unscaled, and scaled inside the region.
  void step(const torch::Tensor &x) {
    opt_.zero_grad();
    ctx_.enter();
    auto loss = net_->forward(x).mean();
    ctx_.exit();
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a loss computed in a float16 autocast region with no loss scaling
    // CHECK-MESSAGES: :[[@LINE-5]]:10: note: the float16 region that computed the loss starts here
    opt_.step();
    ctx_.enter();
    auto again = net_->forward(x).mean();
    (again * scale_).backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: backward() runs inside an autocast region
    // CHECK-MESSAGES: :[[@LINE-4]]:10: note: autocast is switched on here
    ctx_.exit();
    opt_.step();
  }

private:
  Net net_;
  AmpContext ctx_;
  double scale_;
  torch::optim::SGD opt_;
};

// The same context class, configured for bfloat16 by every caller.
class BfTuner {
public:
  BfTuner(Net net, const TunerConfig &cfg)
      : net_(net), ctx_{cfg.amp}, opt_(net_->parameters(), torch::optim::SGDOptions(0.1)) {}
  void step(const torch::Tensor &x) {
    opt_.zero_grad();
    ctx_.enter();
    auto loss = net_->forward(x).mean();
    ctx_.exit();
    loss.backward();
    opt_.step();
  }

private:
  Net net_;
  AmpContext ctx_;
  torch::optim::SGD opt_;
};

// A helper called inside the region returns the loss in a struct.
struct StepOutputs {
  torch::Tensor loss;
  int64_t tokens = 0;
};
StepOutputs forward_step(Net &net) { return {net->forward(batch()).mean(), 8}; }
void struct_loss(Net &net, torch::optim::Optimizer &opt) {
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    StepOutputs out = forward_step(net);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    out.loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: backward() of a loss computed in a float16 autocast region with no loss scaling
    // CHECK-MESSAGES: :[[@LINE-5]]:5: note: the float16 region that computed the loss starts here
    opt.step();
  }
}

// A guard engaged on some paths: std::optional<Guard>::emplace runs the
// guard's constructor, and the optional's end of scope its destructor.
struct HalfScope {
  explicit HalfScope(at::ScalarType dtype)
      : was_(at::autocast::is_autocast_enabled(at::kCUDA)) {
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
  }
  ~HalfScope() { at::autocast::set_autocast_enabled(at::kCUDA, was_); }
  bool was_;
};
void optional_scope(Net &net, torch::optim::Optimizer &opt, bool amp) {
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      std::optional<HalfScope> scope;
      if (amp)
        scope.emplace(at::kHalf);
      loss = net->forward(batch()).mean();
    }
    loss.backward();
    // CHECK-MESSAGES: :[[@LINE-1]]:10: warning: backward() of a loss computed in a float16 autocast region with no loss scaling
    // CHECK-MESSAGES: :[[@LINE-5]]:15: note: the float16 region that computed the loss starts here
    opt.step();
  }
}
void optional_bf16_scope(Net &net, torch::optim::Optimizer &opt, bool amp) {
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      std::optional<HalfScope> scope;
      if (amp)
        scope.emplace(at::kBFloat16);
      loss = net->forward(batch()).mean();
    }
    loss.backward();
    opt.step();
  }
}

// A trainer whose step opens and closes the region through two wrappers of
// a member's methods: each is analysed once per class build, not once per
// caller of a caller.
struct AmpFlag {
  bool active = false;
  void enter() { active = true; }
  void exit() { active = false; }
};
class WrappedSteps {
public:
  void fit() {
    for (int i = 0; i < 3; ++i)
      step();
  }
  float last() const { return last_; }

private:
  void begin_step() { flag_.enter(); }
  void end_step() { flag_.exit(); }
  void step() {
    begin_step();
    end_step();
    ++last_;
  }
  AmpFlag flag_;
  float last_ = 0;
};

// A guard class derived from another: its implicit destructor runs the
// base's, which restores autocast; so does an optional's reset().
struct HalfRegion : HalfScope {
  HalfRegion() : HalfScope(at::kHalf) {}
};
void derived_guard(Net &net, torch::optim::Optimizer &opt) {
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    torch::Tensor loss;
    {
      HalfRegion region;
      loss = net->forward(batch()).mean() * 1024.0;
    }
    loss.backward();
    opt.step();
  }
}
void optional_reset(Net &net, torch::optim::Optimizer &opt) {
  std::optional<HalfScope> scope;
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    scope.emplace(at::kHalf);
    auto loss = net->forward(batch()).mean() * 1024.0;
    scope.reset();
    loss.backward();
    opt.step();
  }
}

int main() {
  Net net;
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1));
  AmpSwitch fp16(at::kHalf), bf16(at::kBFloat16);
  struct_loss(net, opt); // CUDA autocast's dtype is float16 at start
  calibrate(net, fp16, opt);
  finetune(net, bf16, opt);
  net->eval();
  score(net, fp16, batch());
  score_closed(net, bf16, batch());
  TunerConfig half;
  half.amp = AmpMode::Fp16;
  Tuner tuner(net, half);
  TunerConfig brain;
  BfTuner bf(net, brain);
  net->train();
  for (int i = 0; i < 3; ++i) {
    tuner.step(batch());
    bf.step(batch());
  }
  optional_scope(net, opt, true);
  optional_bf16_scope(net, opt, true); // leaves the dtype bfloat16
  WrappedSteps wrapped;
  wrapped.fit();
  derived_guard(net, opt);
  optional_reset(net, opt);
}

