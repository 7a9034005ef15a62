// RUN: %check_torch_tidy %s torch-inference-without-no-grad %t

#include <torch/torch.h>
#include <vector>

struct NetImpl : torch::nn::Module {
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
