// REQUIRES: check-torch-inference-without-no-grad
// RUN: %check_torch_tidy %s torch-inference-without-no-grad %t

#include <torch/torch.h>
#include <functional>
#include <tuple>
#include <vector>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

std::vector<torch::Tensor> load_batches();
void log_accuracy(double acc);
void train_step_elsewhere(torch::Tensor loss);

// --- Positives -------------------------------------------------------------

double evaluate(Net &net, const std::vector<torch::Tensor> &batches) {
  double correct = 0;
  net->eval();
  for (const auto &x : batches) {
    auto out = net->forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard; autograd records the graph and keeps every activation for a backward that never comes (evaluation or validation loop?) [torch-inference-without-no-grad]
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop runs no backward() or optimizer step; declare 'torch::NoGradGuard no_grad;' before it
    correct += out.argmax(1).sum().item<double>();
  }
  return correct;
}

void holder_call_in_while(Net net) {
  auto batches = load_batches();
  size_t i = 0;
  while (i < batches.size()) {
    auto y = net(batches[i++]);
    // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop runs no backward()
    log_accuracy(y.mean().item<double>());
  }
}

void shared_ptr_module(std::shared_ptr<NetImpl> model) {
  for (int i = 0; i < 10; ++i) {
    torch::Tensor out = model->forward(torch::randn({1, 4}));
    // CHECK-MESSAGES: :[[@LINE-1]]:25: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop
  }
}

void guard_in_a_sibling_block(Net &net) {
  for (const auto &x : load_batches()) {
    {
      torch::NoGradGuard no_grad; // ends before the forward
    }
    net->forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES: :[[@LINE-6]]:3: note: this loop
  }
}

void guard_after_the_forward(Net &net) {
  for (const auto &x : load_batches()) {
    auto out = net(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop
    torch::NoGradGuard too_late;
  }
}

void inference_mode_false(Net &net) {
  c10::InferenceMode off(false);
  for (const auto &x : load_batches()) {
    net->forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop
  }
}

void re_enabled_inside_a_guard(Net &net) {
  torch::NoGradGuard no_grad;
  for (const auto &x : load_batches()) {
    torch::AutoGradMode enable(true);
    net->forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES: :[[@LINE-4]]:3: note: this loop
  }
}

void validation_loop_after_training(Net &net, torch::optim::SGD &opt) {
  for (const auto &x : load_batches()) {
    opt.zero_grad();
    auto loss = net->forward(x).sum();
    loss.backward();
    opt.step();
  }
  double total = 0;
  for (const auto &x : load_batches()) {
    total += net->forward(x).sum().item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop
  }
  log_accuracy(total);
}

void forward_in_a_lambda_in_the_loop(Net &net) {
  for (const auto &x : load_batches()) {
    auto run = [&] { return net->forward(x); };
    // CHECK-MESSAGES: :[[@LINE-1]]:29: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop
    log_accuracy(run().mean().item<double>());
  }
}

void called_without_guard(Net &net) {
  for (const auto &x : load_batches()) {
    net->forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop
  }
}
void unguarded_caller(Net &net) { called_without_guard(net); }

void one_warning_per_loop(Net &encoder, Net &decoder) {
  for (const auto &x : load_batches()) {
    auto h = encoder(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: module forward in a loop that never calls backward()
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop
    auto y = decoder(h);
    log_accuracy(y.sum().item<double>());
  }
}

// --- Negatives -------------------------------------------------------------

double evaluate_with_guard(Net &net) {
  torch::NoGradGuard no_grad;
  double correct = 0;
  for (const auto &x : load_batches())
    correct += net->forward(x).sum().item<double>();
  return correct;
}

void guard_inside_the_loop(Net &net) {
  for (const auto &x : load_batches()) {
    torch::NoGradGuard no_grad;
    net->forward(x);
  }
}

void inference_mode(Net &net) {
  c10::InferenceMode guard;
  for (const auto &x : load_batches())
    net->forward(x);
}

void autograd_mode_false(Net &net) {
  torch::AutoGradMode disable(false);
  for (const auto &x : load_batches())
    net->forward(x);
}

void guard_in_an_enclosing_scope(Net &net) {
  torch::NoGradGuard no_grad;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (const auto &x : load_batches())
      net->forward(x);
  }
}

void training_loop(Net &net, torch::optim::Adam &opt) {
  for (const auto &x : load_batches()) {
    opt.zero_grad();
    auto loss = net->forward(x).sum();
    loss.backward();
    opt.step();
  }
}

void autograd_backward_function(Net &net) {
  for (const auto &x : load_batches()) {
    auto loss = net(x).sum();
    torch::autograd::backward({loss});
  }
}

void gradient_accumulation_after_the_loop(Net &net) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches())
    total = total + net->forward(x).sum();
  total.backward();
}

void micro_batches_in_an_outer_training_loop(Net &net, torch::optim::SGD &opt) {
  for (int step = 0; step < 100; ++step) {
    std::vector<torch::Tensor> outs;
    for (const auto &x : load_batches())
      outs.push_back(net(x));
    torch::stack(outs).sum().backward();
    opt.step();
  }
}

void helper_with_backward(torch::Tensor loss) { loss.backward(); }
void backward_in_a_visible_helper(Net &net) {
  for (const auto &x : load_batches())
    helper_with_backward(net->forward(x).sum());
}

void backward_in_an_opaque_helper(Net &net) {
  for (const auto &x : load_batches())
    train_step_elsewhere(net->forward(x).sum());
}

torch::Tensor returns_outputs_to_the_caller(Net &net) {
  std::vector<torch::Tensor> outs;
  for (const auto &x : load_batches())
    outs.push_back(net(x));
  return torch::stack(outs);
}

void guarded_only_by_its_caller(Net &net) {
  for (const auto &x : load_batches())
    net->forward(x);
}
void the_unique_caller(Net &net) {
  torch::NoGradGuard no_grad;
  guarded_only_by_its_caller(net);
}

void lambda_called_under_a_guard(Net &net) {
  auto eval = [&] {
    for (const auto &x : load_batches())
      net->forward(x);
  };
  torch::NoGradGuard no_grad;
  eval();
}

void lambda_defined_under_a_guard(Net &net) {
  torch::NoGradGuard no_grad;
  std::function<void()> eval = [&] {
    for (const auto &x : load_batches())
      net->forward(x);
  };
  eval();
}

void runtime_grad_mode(Net &net, bool training) {
  torch::AutoGradMode mode(training);
  for (const auto &x : load_batches())
    net->forward(x);
}

void not_in_a_loop(Net &net) { net->forward(torch::randn({1, 4})); }

void (*escaping_address)(Net &) = nullptr;
void address_taken(Net &net) {
  for (const auto &x : load_batches())
    net->forward(x);
}
void install() { escaping_address = &address_taken; }

// A loop that differentiates through the forward (a gradient penalty,
// Grad-CAM) needs the graph: torch::autograd::grad runs backward.
void gradient_penalty_loop(Net &model) {
  for (int i = 0; i < 10; ++i) {
    auto x = torch::randn({2, 4}).requires_grad_(true);
    auto y = model->forward(x).sum();
    auto g = torch::autograd::grad({y}, {x});
    g[0].sum();
  }
}

// Decoding steps inside a training step: the step's backward() consumes
// every step's output, though the inner loop calls none itself.
struct DecoderImpl : torch::nn::Module {
  DecoderImpl() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor x, torch::Tensor h) {
    auto y = fc(x + h);
    return {y, y};
  }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Decoder);

void unrolled_decoder_steps(Decoder &dec, torch::optim::Optimizer &opt) {
  for (int step = 0; step < 10; ++step) {
    auto hidden = torch::randn({2, 4});
    auto loss = torch::zeros({});
    for (int t = 0; t < 5; ++t) {
      auto [logits, next] = dec->forward(torch::randn({2, 4}), hidden);
      hidden = next;
      loss = loss + logits.sum();
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

// A validation loop beside the training loop, in the same epoch loop: the
// epoch trains, but not in the validation loop.
void validation_beside_training(Net &net, torch::optim::Optimizer &opt) {
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (int i = 0; i < 10; ++i) {
      auto loss = net->forward(torch::randn({2, 4})).sum();
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
    double val = 0;
    for (int i = 0; i < 4; ++i)
      val += net->forward(torch::randn({2, 4})).sum().item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: module forward in a loop that never calls backward() {{.*}}[torch-inference-without-no-grad]
  }
}

// The parts of a tuple forward's output carry its graph: handed back to the
// caller, they are the caller's to train on; only read, they are the bug.
std::vector<torch::Tensor> decode_levels(Decoder &dec, const std::vector<torch::Tensor> &levels,
                                         std::vector<torch::Tensor> &scores_out) {
  std::vector<torch::Tensor> boxes;
  for (size_t l = 0; l < levels.size(); ++l) {
    auto [deltas, scores] = dec->forward(levels[l], levels[l]);
    scores_out.push_back(scores);
    boxes.push_back(deltas + 1);
  }
  return boxes;
}

double score_levels(Decoder &dec, const std::vector<torch::Tensor> &levels) {
  double total = 0;
  for (size_t l = 0; l < levels.size(); ++l) {
    auto [deltas, scores] = dec->forward(levels[l], levels[l]);
    // CHECK-MESSAGES: :[[@LINE-1]]:29: warning: module forward in a loop that never calls backward() {{.*}}[torch-inference-without-no-grad]
    total += scores.sum().item<double>();
  }
  return total;
}

// A generic lambda handed to std::visit runs its instantiation's forward.
#include <variant>

double score_candidates(std::variant<Net> candidate) {
  double total = 0;
  for (int i = 0; i < 5; ++i) {
    auto x = torch::randn({8, 4});
    auto pred = std::visit([&](auto &m) { return m->forward(x); }, candidate);
    // CHECK-MESSAGES: :[[@LINE-1]]:50: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard{{.*}}[torch-inference-without-no-grad]
    total += pred.sum().item<double>();
  }
  return total;
}

double score_candidates_no_grad(std::variant<Net> candidate) {
  torch::NoGradGuard no_grad;
  double total = 0;
  for (int i = 0; i < 5; ++i) {
    auto x = torch::randn({8, 4});
    auto pred = std::visit([&](auto &m) { return m->forward(x); }, candidate);
    total += pred.sum().item<double>();
  }
  return total;
}

// A validation loop written inside the epoch loop is still evaluation; the
// micro-batches whose losses feed the epoch's backward() are not.
void epochs_with_inline_validation(Net &net, torch::optim::Optimizer &opt) {
  for (int epoch = 0; epoch < 10; ++epoch) {
    auto loss = net->forward(torch::randn({8, 4})).sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
    double val = 0;
    for (int b = 0; b < 4; ++b)
      val += net->forward(torch::randn({8, 4})).sum().item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard{{.*}}[torch-inference-without-no-grad]
  }
}

void epochs_with_micro_batches(Net &net, torch::optim::Optimizer &opt) {
  for (int epoch = 0; epoch < 10; ++epoch) {
    torch::Tensor loss = torch::zeros({});
    for (int mb = 0; mb < 4; ++mb)
      loss = loss + net->forward(torch::randn({8, 4})).sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

// A helper whose guard ends at every return, from its try block or its
// handler, leaves autograd as it found it.
#include <vector>
torch::Tensor calibrate_once(torch::nn::Linear &net, torch::Tensor x) {
  torch::NoGradGuard no_grad;
  try {
    return net->forward(x);
  } catch (const std::exception &) {
    return x;
  }
}
double evaluate_after_calibration(torch::nn::Linear &net,
                                  const std::vector<torch::Tensor> &batches) {
  calibrate_once(net, batches.front());
  double total = 0;
  for (const auto &x : batches)
    total += net->forward(x).sum().item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard{{.*}}[torch-inference-without-no-grad]
  return total;
}

// A Lightning-style module: the framework calls its virtual hooks through
// the base class. A virtual call whose only definition this file shows runs
// that definition, and a hook's own forward (not a module's forward) is
// reported where the hook runs it.
struct HookBatch {
  torch::Tensor x;
};
class HookModule : public torch::nn::Module {
public:
  virtual torch::Tensor training_step(const HookBatch &b) = 0;
  virtual double validation_step(const HookBatch &b) = 0;
  virtual double test_step(const HookBatch &b) = 0;
};
class HookClassifier : public HookModule {
public:
  HookClassifier() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(const torch::Tensor &x) { return fc(x); }
  torch::Tensor training_step(const HookBatch &b) override {
    return forward(b.x).sum();
  }
  double validation_step(const HookBatch &b) override {
    return forward(b.x).sum().item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:12: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard{{.*}}[torch-inference-without-no-grad]
  }
  double test_step(const HookBatch &b) override {
    return forward(b.x).sum().item<double>();
  }
  torch::nn::Linear fc{nullptr};
};
void fit_hooks(HookModule &m, const std::vector<HookBatch> &data) {
  for (const auto &b : data)
    m.training_step(b).backward();
  double total = 0;
  for (const auto &b : data)
    total += m.validation_step(b);
  torch::NoGradGuard no_grad;
  for (const auto &b : data)
    total += m.test_step(b);
}

// A parameterless module records a graph only for inputs that have one:
// near-miss. A module with parameters records one: reported.
void plot_activations() {
  auto x = torch::ones({100});
  for (int a = 0; a < 4; ++a) {
    auto y = torch::nn::ReLU()->forward(x);
    auto z = torch::nn::Linear(100, 100)->forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: {{.*}}[torch-inference-without-no-grad]
  }
}

// A type-erased AnyModule runs its module's forward too.
double evaluate_any(torch::nn::AnyModule &model, const std::vector<torch::Tensor> &batches) {
  double total = 0;
  for (const auto &x : batches) {
    auto out = model.forward(x);
    // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard
    total += out.sum().item<double>();
  }
  return total;
}

double evaluate_any_no_grad(torch::nn::AnyModule &model, const std::vector<torch::Tensor> &batches) {
  torch::NoGradGuard no_grad;
  double total = 0;
  for (const auto &x : batches)
    total += model.forward(x).sum().item<double>();
  return total;
}

// A module's own method that runs its layers is a forward of the module,
// reported at its call (once, not at each layer it runs).
struct EncoderImpl : torch::nn::Module {
  EncoderImpl() { fc = register_module("fc", torch::nn::Linear(8, 4)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::Tensor embed(torch::Tensor x) { return fc(x).relu(); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Encoder);
std::vector<torch::Tensor> build_index(Encoder &enc,
                                       const std::vector<torch::Tensor> &docs) {
  std::vector<torch::Tensor> rows;
  for (const auto &d : docs)
    rows.push_back(enc->embed(d).detach());
  // CHECK-MESSAGES: :[[@LINE-1]]:20: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard{{.*}}[torch-inference-without-no-grad]
  return rows;
}

// Forwards collected in a container and reached by backward() through a
// tensor method's argument (`u.matmul(...)`): training, not inference.
void two_tower_step(Net &users, Net &items, torch::optim::SGD &opt,
                    const std::vector<torch::Tensor> &batches) {
  for (const auto &x : batches) {
    opt.zero_grad();
    auto u = users->forward(x);
    std::vector<torch::Tensor> parts;
    for (const auto &ids : {x, x.abs()})
      parts.push_back(items->forward(ids));
    auto logits = u.matmul(torch::cat(parts));
    auto loss = logits.relu().mean();
    loss.backward();
    opt.step();
  }
}

// An evaluator that holds its guard as a member: grad is off while the
// object lives, in its own methods and in what it calls.
class GuardedEvaluator {
public:
  explicit GuardedEvaluator(Net net) : net_(net) {}
  double run(const std::vector<torch::Tensor> &batches) {
    double total = 0;
    for (const auto &x : batches)
      total += net_->forward(x).sum().item<double>();
    return total;
  }

private:
  Net net_;
  torch::NoGradGuard no_grad_;
};
double evaluate_with_member_guard(Net &net,
                                  const std::vector<torch::Tensor> &batches) {
  GuardedEvaluator evaluator(net);
  return evaluator.run(batches);
}

// Micro-batch losses summed with `+=` and backpropagated once: the sum
// keeps every forward's graph, so this is training.
void summed_micro_batches(Net &net, torch::optim::SGD &opt,
                          const std::vector<torch::Tensor> &batches) {
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    auto total = torch::zeros({});
    for (const auto &x : batches) {
      auto loss = net->forward(x).mean();
      total += loss / 4;
    }
    total.backward();
    opt.step();
  }
}
