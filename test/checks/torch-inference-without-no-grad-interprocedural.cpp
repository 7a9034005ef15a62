// RUN: %check_torch_tidy %s torch-inference-without-no-grad %t

#include <torch/torch.h>
#include <future>
#include <thread>
#include <tuple>
#include <vector>

struct NetImpl : torch::nn::Module { torch::nn::Linear fc{nullptr}; // has parameters
  torch::Tensor forward(torch::Tensor x) { return x * 2; }
};
TORCH_MODULE(Net);

std::vector<torch::Tensor> load_batches();
void log_accuracy(double acc);

// --- Template evaluation loops -------------------------------------------------

template <typename DataLoader>
double test(Net &model, DataLoader &loader) {
  double correct = 0;
  model->eval();
  for (const auto &batch : loader) {
    auto output = model->forward(batch.data);
    // CHECK-MESSAGES: :[[@LINE-1]]:19: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard
    // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop runs no backward() or optimizer step
    correct += output.argmax(1).eq(batch.target).sum().template item<double>();
  }
  return correct;
}

void run(Net &model) {
  auto a = torch::data::make_data_loader(
      torch::data::datasets::MNIST("a").map(torch::data::transforms::Stack<>()),
      64);
  auto b = torch::data::make_data_loader(
      torch::data::datasets::MNIST("b").map(torch::data::transforms::Stack<>()),
      torch::data::DataLoaderOptions(8));
  log_accuracy(test(model, *a));
  log_accuracy(test(model, *b));
}

// --- Member functions ---------------------------------------------------------

class Evaluator {
public:
  explicit Evaluator(Net model) : model_(model) {}
  double validate() {
    double sum = 0;
    for (const auto &x : load_batches()) {
      auto y = model_->forward(x);
      // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: module forward in a loop that never calls backward()
      // CHECK-MESSAGES: :[[@LINE-3]]:5: note: this loop runs no backward()
      sum += score(y);
    }
    return sum;
  }

private:
  // Known, and runs no backward: the loop stays an evaluation loop.
  double score(const torch::Tensor &y) { return y.mean().item<double>(); }
  Net model_;
};

// --- Negatives ------------------------------------------------------------------

void step_in_a_helper(torch::Tensor loss, torch::optim::SGD &opt) {
  loss.backward();
  opt.step();
}

void training_through_a_helper(Net &model, torch::optim::SGD &opt) {
  for (const auto &x : load_batches()) {
    auto loss = model->forward(x).sum();
    step_in_a_helper(loss, opt);
  }
}

void train_step_elsewhere(const torch::Tensor &output);

void opaque_helper_may_train(Net &model) {
  for (const auto &x : load_batches())
    train_step_elsewhere(model->forward(x));
}

double guarded_caller_helper(Net &model) {
  double sum = 0;
  for (const auto &x : load_batches())
    sum += model->forward(x).sum().item<double>();
  return sum;
}

void guarded_caller(Net &model) {
  torch::NoGradGuard no_grad;
  log_accuracy(guarded_caller_helper(model));
}

// A detector whose decode() runs its head once per level and hands the
// outputs back; main() trains on them. Main's analysis is first asked for
// while the Detector's state is being built (its constructor's callers): a
// result computed without decode()'s summary then must not be kept.
struct HeadImpl : torch::nn::Module {
  HeadImpl() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
  std::tuple<torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    auto y = fc(x);
    return {y, y};
  }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Head);

class Detector {
public:
  explicit Detector(torch::Device device) : device_(device) { head_->to(device_); }
  std::vector<torch::Tensor> decode(const std::vector<torch::Tensor> &pyramid,
                                    std::vector<torch::Tensor> &logits) {
    std::vector<torch::Tensor> boxes;
    for (size_t l = 0; l < pyramid.size(); ++l) {
      auto [deltas, scores] = head_->forward(pyramid[l]);
      logits.push_back(scores);
      boxes.push_back(deltas + 1);
    }
    return boxes;
  }
  torch::nn::Module &head() { return *head_; }

private:
  torch::Device device_;
  Head head_;
};

int main() {
  torch::Device device(torch::kCPU);
  Detector detector(device);
  torch::optim::SGD opt(detector.head().parameters(), torch::optim::SGDOptions(1e-2));
  for (int step = 0; step < 100; ++step) {
    std::vector<torch::Tensor> pyramid, logits;
    for (int l = 0; l < 3; ++l)
      pyramid.push_back(torch::randn({2, 4}, device));
    auto boxes = detector.decode(pyramid, logits);
    auto loss = boxes[0].sum() + logits[0].sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
}

// The loop is the method's own; its caller reaches it once, outside any loop.
struct LoopingEvaluator {
  Net model;
  void evaluate() {
    for (int b = 0; b < 10; ++b) {
      auto y = model->forward(torch::randn({2, 4}));
      // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: module forward in a loop that never calls backward(){{.*}}
    }
  }
};
void run_looping_evaluator() {
  LoopingEvaluator e;
  e.evaluate();
  // CHECK-MESSAGES: :[[@LINE-1]]:5: note: reached from here
  // CHECK-MESSAGES: :[[@LINE-10]]:5: note: this loop runs no backward()
}

// Near-miss: a module method other than forward runs its submodules in a
// loop and returns what it built; forward returns it, and the training loop
// runs backward() through it. No evaluation loop.
struct SlaterImpl : torch::nn::Module {
  SlaterImpl() {
    for (int i = 0; i < 3; ++i)
      nets.push_back(register_module("net" + std::to_string(i), torch::nn::Linear(3, 3)));
  }
  torch::Tensor rows(torch::Tensor x) {
    std::vector<torch::Tensor> out(nets.size());
    for (size_t i = 0; i < nets.size(); ++i)
      out[i] = nets[i](x);
    return torch::cat(out, 1);
  }
  torch::Tensor forward(torch::Tensor x) { return rows(x).sum(1); }
  std::vector<torch::nn::Linear> nets;
};
TORCH_MODULE(Slater);
void train_slater() {
  Slater model;
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    model->forward(torch::randn({8, 3})).mean().backward();
    opt.step();
  }
}

// --- A function a thread runs -------------------------------------------------
// A new thread starts with autograd on, whatever its starter's mode: its
// function's context is the thread's start, with the object and arguments
// the start hands it.

class ScoringService {
public:
  explicit ScoringService(Net net) : net_(std::move(net)) {}
  void worker(int requests) {
    for (int r = 0; r < requests; ++r) {
      auto scores = net_->forward(torch::randn({4, 8}));
      // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard
      // CHECK-MESSAGES: :[[@LINE-3]]:5: note: this loop runs no backward() or optimizer step
      log_accuracy(scores.mean().item<double>());
    }
  }
  void guarded_worker(int requests) {
    torch::NoGradGuard no_grad;
    for (int r = 0; r < requests; ++r)
      log_accuracy(net_->forward(torch::randn({4, 8})).mean().item<double>());
  }

private:
  Net net_;
};

void serve(Net net) {
  torch::NoGradGuard no_grad; // this thread's mode, not the workers'
  ScoringService service(net);
  std::thread scoring(&ScoringService::worker, &service, 100);
  std::thread guarded(&ScoringService::guarded_worker, &service, 100);
  scoring.join();
  guarded.join();
}

void score_batches(Net net, int batches) {
  for (int b = 0; b < batches; ++b)
    log_accuracy(net->forward(torch::randn({4, 8})).mean().item<double>());
  // CHECK-MESSAGES: :[[@LINE-1]]:18: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard
  // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop runs no backward() or optimizer step
}

void serve_in_thread(Net net) {
  torch::NoGradGuard no_grad;
  auto pending = std::async(std::launch::async, score_batches, net, 10);
  pending.wait();
}

// A guarded helper whose TORCH_CHECK fails on some path: that path never
// returns, so the caller's grad mode after the call is its own again.
void export_scores(Net net, int batches) {
  torch::NoGradGuard no_grad;
  for (int b = 0; b < batches; ++b) {
    auto scores = net->forward(torch::randn({4, 8}));
    TORCH_CHECK(scores.numel() > 0, "empty scores");
    log_accuracy(scores.mean().item<double>());
  }
}
void export_then_stream(Net net) {
  export_scores(net, 4);
  for (int frame = 0; frame < 100; ++frame)
    log_accuracy(net->forward(torch::randn({4, 8})).mean().item<double>());
  // CHECK-MESSAGES: :[[@LINE-1]]:18: warning: module forward in a loop that never calls backward() runs without torch::NoGradGuard
  // CHECK-MESSAGES: :[[@LINE-3]]:3: note: this loop runs no backward() or optimizer step
}
