// REQUIRES: check-torch-loss-accumulation-graph
// RUN: %check_torch_tidy %s torch-loss-accumulation-graph %t

#include <torch/torch.h>
#include <numeric>
#include <variant>
#include <vector>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

std::vector<torch::Tensor> load_batches();
void report(const torch::Tensor &t);
void report(double v);

// --- Positives -------------------------------------------------------------

void pytorch_faq_training_loop(Net &net, torch::optim::SGD &opt) {
  torch::Tensor total_loss = torch::zeros({});
  for (const auto &x : load_batches()) {
    opt.zero_grad();
    auto loss = net->forward(x).sum();
    loss.backward();
    opt.step();
    total_loss += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total_loss', declared outside the loop; every iteration's graph stays alive and memory grows with each step [torch-loss-accumulation-graph]
    // CHECK-FIXES: {{^}}    total_loss += loss.detach();{{$}}
  }
  report(total_loss);
}

void assign_sum(Net &net) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    auto loss = torch::nn::functional::mse_loss(net(x), x);
    total = total + loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total', declared outside the loop
    // CHECK-FIXES: {{^}}    total = total + loss.detach();{{$}}
  }
  report(total);
}

void assign_sum_reversed(Net &net) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    torch::Tensor loss = net->forward(x).mean();
    total = loss + total;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total', declared outside the loop
    // CHECK-FIXES: {{^}}    total = loss.detach() + total;{{$}}
  }
  report(total);
}

void append_to_a_vector(Net &net) {
  std::vector<torch::Tensor> losses;
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    losses.push_back(loss);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is appended to 'losses', declared outside the loop
    // CHECK-FIXES: {{^}}    losses.push_back(loss.detach());{{$}}
  }
  report(torch::stack(losses));
}

void emplace_module_outputs(Net &net) {
  std::vector<torch::Tensor> outputs;
  for (const auto &x : load_batches()) {
    outputs.emplace_back(net->forward(x));
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'net->forward(x)' is still attached to its autograd graph and is appended to 'outputs', declared outside the loop
    // CHECK-FIXES: {{^}}    outputs.emplace_back(net->forward(x).detach());{{$}}
  }
  report(torch::stack(outputs));
}

class Trainer {
public:
  void train_epoch(torch::optim::Adam &opt) {
    for (const auto &x : load_batches()) {
      opt.zero_grad();
      auto loss = net_(x).sum();
      loss.backward();
      opt.step();
      epoch_loss_ += loss;
      // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'loss' is still attached to its autograd graph and is accumulated into member 'epoch_loss_'
      // CHECK-FIXES: {{^}}      epoch_loss_ += loss.detach();{{$}}
    }
  }

private:
  Net net_;
  torch::Tensor epoch_loss_;
};

void arithmetic_on_the_loss(Net &net) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    total += loss * 0.5;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss * 0.5' is still attached to its autograd graph and is accumulated into 'total', declared outside the loop
    // CHECK-FIXES: {{^}}    total += (loss * 0.5).detach();{{$}}
  }
  report(total);
}

void in_place_add(Net &net) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    auto out = net(x);
    total.add_(out.sum());
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'out.sum()' is still attached to its autograd graph and is accumulated into 'total', declared outside the loop
    // CHECK-FIXES: {{^}}    total.add_(out.sum().detach());{{$}}
  }
  report(total);
}

struct Stats {
  torch::Tensor total;
  int steps = 0;
};
void field_of_a_local(Net &net) {
  Stats stats;
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    stats.total += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into 'stats.total', declared outside the loop
    // CHECK-FIXES: {{^}}    stats.total += loss.detach();{{$}}
  }
  report(stats.total);
}

void parameter_in_a_training_loop(Net &net, torch::optim::SGD &opt,
                                  torch::Tensor &running) {
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    loss.backward();
    opt.step();
    running += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph and is accumulated into parameter 'running'
    // CHECK-FIXES: {{^}}    running += loss.detach();{{$}}
  }
}

void accumulated_in_a_lambda(Net &net) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    [&] {
      auto loss = net(x).sum();
      total += loss;
      // CHECK-MESSAGES: :[[@LINE-1]]:7: warning: 'loss' is still attached to its autograd graph and is accumulated into 'total', declared outside the loop
      // CHECK-FIXES: {{^}}      total += loss.detach();{{$}}
    }();
  }
  report(total);
}

// --- Negatives -------------------------------------------------------------

void item_into_a_double(Net &net) {
  double total = 0;
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    total += loss.item<double>();
  }
  report(total);
}

void detached(Net &net) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    total += loss.detach();
  }
  report(total);
}

void under_no_grad(Net &net) {
  torch::NoGradGuard no_grad;
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    total += loss;
  }
  report(total);
}

void sum_under_a_nested_guard(Net &net) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    {
      torch::NoGradGuard no_grad;
      total += loss;
    }
  }
  report(total);
}

void accumulator_inside_the_loop(Net &net) {
  for (const auto &x : load_batches()) {
    torch::Tensor step_total = torch::zeros({});
    auto loss = net->forward(x).sum();
    step_total += loss;
    report(step_total);
  }
}

void reset_every_iteration(Net &net) {
  torch::Tensor total;
  std::vector<torch::Tensor> parts;
  for (const auto &x : load_batches()) {
    total = torch::zeros({});
    parts.clear();
    auto loss = net->forward(x).sum();
    total += loss;
    parts.push_back(loss);
    report(total);
  }
}

void gradient_accumulation_then_backward(Net &net, torch::optim::SGD &opt) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches()) {
    auto loss = net->forward(x).sum();
    total = total + loss;
  }
  total.backward();
  opt.step();
}

void stacked_then_backward(Net &net) {
  std::vector<torch::Tensor> losses;
  for (const auto &x : load_batches())
    losses.push_back(net->forward(x).sum());
  torch::stack(losses).sum().backward();
}

torch::Tensor returned_to_the_caller(Net &net) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches())
    total += net->forward(x).sum();
  return total;
}

void guarded_by_its_only_caller(Net &net) {
  torch::Tensor total = torch::zeros({});
  for (const auto &x : load_batches())
    total += net->forward(x).sum();
  report(total);
}
void the_caller(Net &net) {
  torch::NoGradGuard no_grad;
  guarded_by_its_only_caller(net);
}

void parameter_outside_a_training_loop(Net &net, torch::Tensor &total) {
  for (const auto &x : load_batches())
    total += net->forward(x).sum();
}

void not_in_a_loop(Net &net) {
  torch::Tensor total = torch::zeros({});
  total += net->forward(torch::randn({1, 4})).sum();
  report(total);
}

void factory_values_have_no_graph() {
  torch::Tensor total = torch::zeros({});
  for (int i = 0; i < 10; ++i)
    total += torch::randn({1});
  report(total);
}

void overwriting_is_not_accumulating(Net &net) {
  torch::Tensor best = torch::zeros({});
  for (const auto &x : load_batches())
    best = net->forward(x).sum();
  report(best);
}

// A loss summed over the steps of a sequence may be a zero with no graph
// (no step ran); backward() on it proves the graph all the same.
void sequence_losses_curve(Net &net, std::vector<torch::Tensor> &curve) {
  for (int step = 0; step < 100; ++step) {
    auto loss = torch::zeros({});
    for (int t = 0; t < 8; ++t)
      loss = loss + net->forward(torch::randn({1, 4})).sum();
    loss.backward();
    curve.push_back(loss);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph{{.*}}[torch-loss-accumulation-graph]
  }
}

void sequence_losses_detached(Net &net, std::vector<torch::Tensor> &curve) {
  for (int step = 0; step < 100; ++step) {
    auto loss = torch::zeros({});
    for (int t = 0; t < 8; ++t)
      loss = loss + net->forward(torch::randn({1, 4})).sum();
    loss.backward();
    curve.push_back(loss.detach());
  }
}

// An accumulator reached through the iterator an insert returns.
#include <map>
#include <string>

void running_sums_by_name(Net &net, std::map<std::string, torch::Tensor> &sums) {
  for (int step = 0; step < 100; ++step) {
    auto loss = net->forward(torch::randn({1, 4})).sum();
    loss.backward();
    auto slot = sums.try_emplace("loss", torch::zeros({})).first;
    slot->second += loss;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph{{.*}}[torch-loss-accumulation-graph]
  }
}

void running_sums_by_name_detached(Net &net, std::map<std::string, torch::Tensor> &sums) {
  for (int step = 0; step < 100; ++step) {
    auto loss = net->forward(torch::randn({1, 4})).sum();
    loss.backward();
    auto slot = sums.try_emplace("loss", torch::zeros({})).first;
    slot->second += loss.detach();
  }
}

// Indices and comparisons of a graph's tensors carry no graph: keeping the
// predictions of every step holds no activations.
void keep_predictions(Net &model, torch::optim::SGD &opt) {
  std::vector<torch::Tensor> guesses, hits, scores;
  for (int step = 0; step < 100; ++step) {
    auto logits = model->forward(torch::randn({8, 4}));
    auto loss = logits.sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
    guesses.push_back(logits.argmax(1));
    hits.push_back(logits.eq(logits));
    scores.push_back(logits);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'logits' is still attached to its autograd graph {{.*}}[torch-loss-accumulation-graph]
  }
}

// A virtual method may be called through its base from code no one sees:
// its grad mode is unknown, and its visible callers decide what they pass.
struct MeterBase {
  virtual ~MeterBase() = default;
  virtual void update(const torch::Tensor &out) = 0;
};
struct LossMeter final : MeterBase {
  void update(const torch::Tensor &out) override {
    sum_ += torch::nn::functional::mse_loss(out, torch::zeros({8, 2}));
  }
  torch::Tensor sum_ = torch::zeros({});
};
void validate_with_meter(Net &net, LossMeter &meter) {
  torch::NoGradGuard no_grad;
  for (int b = 0; b < 10; ++b)
    meter.update(net->forward(torch::randn({8, 4})));
}

// An element of a tensor keeps its graph.
void keep_first_samples(Net &model, torch::optim::SGD &opt) {
  std::vector<torch::Tensor> samples;
  for (int step = 0; step < 100; ++step) {
    auto fake = model->forward(torch::randn({8, 4}));
    opt.zero_grad();
    fake.sum().backward();
    opt.step();
    samples.push_back(fake[0]);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'fake[0]' is still attached to its autograd graph {{.*}}[torch-loss-accumulation-graph]
    samples.push_back(fake[1].detach());
  }
}

// A virtual method called from a training loop: the visible calls decide.
struct RunningLoss final : MeterBase {
  void update(const torch::Tensor &out) override {
    sum_ += torch::nn::functional::mse_loss(out, torch::zeros({8, 2}));
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: the value is still attached to its autograd graph and is accumulated into member 'sum_'{{.*}}[torch-loss-accumulation-graph]
  }
  torch::Tensor sum_ = torch::zeros({});
};
void train_with_meter(Net &net, torch::optim::SGD &opt) {
  RunningLoss meter;
  for (int b = 0; b < 10; ++b) {
    auto out = net->forward(torch::randn({8, 4}));
    opt.zero_grad();
    out.sum().backward();
    opt.step();
    meter.update(out);
  }
}

// Comparisons and bitwise operators of tensors make bool tensors: no graph.
void count_hits(Net &model, torch::optim::SGD &opt) {
  auto hits = torch::zeros({}, torch::kLong);
  for (int step = 0; step < 100; ++step) {
    auto pred = model->forward(torch::randn({8, 4}));
    opt.zero_grad();
    pred.sum().backward();
    opt.step();
    auto wet = pred > 0.5, dry = pred <= 0.1;
    hits += (wet & ~dry).sum();
    hits += (pred != pred.detach()).sum();
  }
}

// A std::variant of a tensor and a tag: the tensor alternative is what
// std::get<Tensor> reads (the tag holds no tensor).
struct SkipTag {
  double fraction;
};
std::variant<torch::Tensor, SkipTag> step_or_skip(Net &model, torch::optim::SGD &opt,
                                                  const torch::Tensor &x) {
  if (x.numel() == 0)
    return SkipTag{0.0};
  auto loss = model->forward(x).mean();
  opt.zero_grad();
  loss.backward();
  opt.step();
  return loss;
}
void sum_step_losses(Net &model, torch::optim::SGD &opt) {
  auto total = torch::zeros({});
  for (int step = 0; step < 100; ++step) {
    auto outcome = step_or_skip(model, opt, torch::randn({8, 4}));
    if (std::holds_alternative<SkipTag>(outcome))
      continue;
    total += std::get<torch::Tensor>(outcome);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'std::get<torch::Tensor>(outcome)' (from 'step_or_skip()' {{.*}}) is still attached to its autograd graph {{.*}}[torch-loss-accumulation-graph]
  }
}

// A running mean written as an update of itself (`c = c + a * (v - c)`):
// each step's loss is still added.
void running_mean_of_losses(Net &model, torch::optim::SGD &opt) {
  auto smooth = torch::zeros({});
  for (int step = 0; step < 100; ++step) {
    auto loss = model->forward(torch::randn({8, 4})).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
    smooth = smooth + 0.02 * (loss - smooth);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'loss' is still attached to its autograd graph {{.*}}[torch-loss-accumulation-graph]
  }
}

// std::accumulate over the step's part losses: their sum keeps their graphs.
void folded_part_losses(Net &model, torch::optim::SGD &opt) {
  auto total = torch::zeros({});
  for (int step = 0; step < 100; ++step) {
    std::vector<torch::Tensor> parts;
    for (int k = 0; k < 3; ++k)
      parts.push_back(model->forward(torch::randn({8, 4})).mean());
    auto sum = std::accumulate(parts.begin(), parts.end(), torch::zeros({}));
    opt.zero_grad();
    sum.backward();
    opt.step();
    total += sum;
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'sum' is still attached to its autograd graph {{.*}}[torch-loss-accumulation-graph]
  }
}

// `.data()` is the value without its graph, as `.detach()` is.
void accumulated_data(Net &model, torch::optim::SGD &opt) {
  auto total = torch::zeros({});
  for (int step = 0; step < 100; ++step) {
    auto loss = model->forward(torch::randn({8, 4})).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
    total += loss.data();
  }
}
