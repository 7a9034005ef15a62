// Second-order MAML for 5-way few-shot classification of synthetic feature
// vectors (each task draws 5 random class prototypes). The network has a
// functional forward on an explicit weight list for the inner loop, and its
// own forward for plain use. A MetaLearner wrapper owns the network and the
// meta-optimizer, exposes train_mode()/eval_mode(), and counts the tasks it
// has seen to step once per meta-batch. Meta-testing fine-tunes a clone with
// SGD on each test task's support set.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kWays = 5, kShots = 5, kQueries = 15, kDim = 32;

struct FewShotNetImpl : torch::nn::Module {
  FewShotNetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kDim, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, 64))),
        drop(register_module("drop", torch::nn::Dropout(0.2))),
        head(register_module("head", torch::nn::Linear(64, kWays))) {}

  torch::Tensor forward(const torch::Tensor &x) {
    return head(drop(torch::relu(fc2(torch::relu(fc1(x))))));
  }

  // The same network on explicit weights (fc1.w, fc1.b, fc2.w, fc2.b, head.w, head.b).
  torch::Tensor forward_with(const torch::Tensor &x, const std::vector<torch::Tensor> &w) {
    auto h = torch::relu(F::linear(x, w[0], w[1]));
    h = torch::dropout(torch::relu(F::linear(h, w[2], w[3])), 0.2, is_training());
    return F::linear(h, w[4], w[5]);
  }

  torch::nn::Linear fc1, fc2;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
};
TORCH_MODULE(FewShotNet);

struct Task {
  torch::Tensor support_x, support_y, query_x, query_y;
};

Task sample_task(torch::Device device) {
  auto protos = 2.0 * torch::randn({kWays, kDim}, device);
  auto labels = torch::arange(kWays, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto sy = labels.repeat_interleave(kShots), qy = labels.repeat_interleave(kQueries);
  return {protos.index_select(0, sy) + torch::randn({kWays * kShots, kDim}, device), sy,
          protos.index_select(0, qy) + torch::randn({kWays * kQueries, kDim}, device), qy};
}

class MetaLearner {
public:
  MetaLearner(FewShotNet net, int64_t meta_batch, int64_t inner_steps, double inner_lr)
      : net_(std::move(net)), meta_opt_(net_->parameters(), torch::optim::AdamOptions(1e-3)),
        meta_batch_(meta_batch), inner_steps_(inner_steps), inner_lr_(inner_lr) {}

  void train_mode() { net_->train(); }
  void eval_mode() { net_->eval(); }
  FewShotNet &net() { return net_; }

  // Adapts to the task's support set and backpropagates the query loss
  // through the adaptation into the meta-parameters.
  void outer_step(const Task &task) {
    std::vector<torch::Tensor> fast = net_->parameters();
    for (int64_t k = 0; k < inner_steps_; ++k) {
      auto inner_loss = F::cross_entropy(net_->forward_with(task.support_x, fast), task.support_y);
      auto grads = torch::autograd::grad({inner_loss}, fast, {}, /*retain_graph=*/true, /*create_graph=*/true);
      for (size_t i = 0; i < fast.size(); ++i)
        fast[i] = fast[i] - inner_lr_ * grads[i];
    }
    auto query_loss = F::cross_entropy(net_->forward_with(task.query_x, fast), task.query_y);
    // BUG(torch-grad-accumulation-unscaled): the meta-gradients of
    // meta_batch_ tasks add up before one step, but each query loss is a
    // mean that is never divided by meta_batch_.
    query_loss.backward();
    if (++tasks_seen_ % meta_batch_ == 0) {
      meta_opt_.step();
      // OK(torch-missing-zero-grad): reset under the same condition as the step.
      meta_opt_.zero_grad();
    }
  }

  // Query loss of the meta-initialisation before any adaptation.
  double zero_shot_loss(const std::vector<Task> &tasks) {
    torch::NoGradGuard no_grad;
    double total = 0;
    for (const auto &task : tasks)
      // BUG(torch-eval-mode-missing): main() calls train_mode() before every
      // meta-epoch and nothing switches to eval_mode() before this check.
      total += F::cross_entropy(net_->forward(task.query_x), task.query_y).item<double>();
    return total / static_cast<double>(tasks.size());
  }

private:
  FewShotNet net_;
  torch::optim::Adam meta_opt_;
  int64_t meta_batch_, inner_steps_;
  double inner_lr_;
  int64_t tasks_seen_ = 0;
};

// Query loss of each task before adaptation, used to pick the hardest ones.
std::vector<double> task_difficulty(MetaLearner &learner, const std::vector<Task> &tasks) {
  learner.eval_mode();
  std::vector<double> losses;
  for (const auto &task : tasks) {
    // BUG(torch-inference-without-no-grad): eval_mode() switched Dropout off,
    // but nothing switched autograd off.
    auto logits = learner.net()->forward(task.query_x);
    losses.push_back(F::cross_entropy(logits, task.query_y).item<double>());
  }
  learner.train_mode();
  return losses;
}

void release_task_memory() {
  // BUG(torch-empty-cache-in-loop): main() calls this after every meta-test
  // task.
  c10::cuda::CUDACachingAllocator::emptyCache();
}

double meta_test_accuracy(const FewShotNet &meta, const Task &task, int64_t steps, double lr) {
  FewShotNet learner(std::dynamic_pointer_cast<FewShotNetImpl>(meta->clone()));
  learner->train();
  torch::optim::SGD sgd(learner->parameters(), torch::optim::SGDOptions(lr));
  for (int64_t k = 0; k < steps; ++k) {
    auto loss = F::cross_entropy(learner->forward(task.support_x), task.support_y);
    loss.backward();
    // BUG(torch-missing-zero-grad): the fine-tune never resets the clone's
    // gradients, so step k applies the sum of k support gradients.
    sgd.step();
  }
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): the clone was put in train() for the
  // fine-tune and is scored on the query set with Dropout on.
  auto pred = learner->forward(task.query_x).argmax(1);
  return pred.eq(task.query_y).to(torch::kFloat).mean().item<double>();
}

int main() {
  torch::manual_seed(142);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  FewShotNet net;
  net->to(device);
  MetaLearner learner(net, /*meta_batch=*/4, /*inner_steps=*/3, /*inner_lr=*/0.4);

  std::vector<Task> val_tasks;
  for (int i = 0; i < 16; ++i)
    val_tasks.push_back(sample_task(device));

  for (int epoch = 0; epoch < 10; ++epoch) {
    learner.train_mode();
    for (int it = 0; it < 200; ++it)
      learner.outer_step(sample_task(device));
    std::cout << "meta-epoch " << epoch << " zero-shot query loss " << learner.zero_shot_loss(val_tasks) << '\n';
  }

  auto difficulty = task_difficulty(learner, val_tasks);
  std::cout << "hardest val task loss " << *std::max_element(difficulty.begin(), difficulty.end()) << '\n';

  double acc = 0;
  const int tests = 50;
  for (int t = 0; t < tests; ++t) {
    acc += meta_test_accuracy(learner.net(), sample_task(device), 10, 0.05);
    release_task_memory();
  }
  std::cout << "meta-test accuracy " << acc / tests << '\n';
  return 0;
}
