// Continual learning over a sequence of permuted-pixel tasks with elastic
// weight consolidation (EWC). After each task the diagonal Fisher and an
// anchor copy of every parameter are stored in name-keyed maps; the next
// task's loss adds the quadratic penalty. Accuracy on all seen tasks is
// measured after each task.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace cl {

using ParamMap = std::map<std::string, torch::Tensor>;

struct MlpImpl : torch::nn::Module {
  MlpImpl() : fc1(register_module("fc1", torch::nn::Linear(784, 256))), fc2(register_module("fc2", torch::nn::Linear(256, 10))) {}
  torch::Tensor forward(const torch::Tensor &x) { return fc2->forward(torch::relu(fc1->forward(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Mlp);

struct Task {
  torch::Tensor perm;  // pixel permutation, host
  torch::Tensor permute(const torch::Tensor &x) const { return x.index_select(1, perm.to(x.device())); }
};

std::pair<torch::Tensor, torch::Tensor> batch(int64_t n) {
  return {torch::rand({n, 784}), torch::randint(0, 10, {n})};
}

// Diagonal Fisher estimated from squared gradients of the log-likelihood.
ParamMap fisher_diag(Mlp &net, const Task &task, torch::Device dev, int samples) {
  ParamMap fisher;
  for (auto &p : net->named_parameters())
    fisher[p.key()] = torch::zeros_like(p.value());
  for (int s = 0; s < samples; ++s) {
    auto [x, y] = batch(32);
    net->zero_grad();
    auto logp = torch::log_softmax(net->forward(task.permute(x.to(dev))), 1);
    torch::nn::functional::nll_loss(logp, y.to(dev)).backward();
    for (auto &p : net->named_parameters())
      // OK(torch-loss-accumulation-graph): gradients carry no graph.
      fisher[p.key()] += p.value().grad().pow(2) / samples;
  }
  return fisher;
}

torch::Tensor ewc_penalty(Mlp &net, const std::vector<ParamMap> &fishers, const std::vector<ParamMap> &anchors) {
  torch::Tensor pen = torch::zeros({}, net->parameters().front().options());
  for (size_t t = 0; t < fishers.size(); ++t)
    for (auto &p : net->named_parameters())
      // OK(torch-loss-accumulation-graph, torch-device-mismatch): the
      // penalty is returned into this step's loss; the Fisher and anchor
      // copies were made from the parameters, on their device.
      pen = pen + (fishers[t].at(p.key()) * (p.value() - anchors[t].at(p.key())).pow(2)).sum();
  return pen;
}

}  // namespace cl

int main() {
  torch::manual_seed(0);
  const torch::Device dev = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  cl::Mlp net;
  net->to(dev);
  torch::optim::SGD opt(net->parameters(), 0.05);
  std::vector<cl::Task> tasks;
  for (int t = 0; t < 5; ++t)
    tasks.push_back({torch::randperm(784)});

  std::vector<cl::ParamMap> fishers, anchors;
  const double lambda = 400.0;
  for (size_t t = 0; t < tasks.size(); ++t) {
    torch::Tensor epoch_penalty = torch::zeros({}, dev);
    std::map<std::string, torch::Tensor> task_stats{{"objective", torch::zeros({}, dev)}};
    for (int step = 0; step < 2000; ++step) {
      auto [x, y] = cl::batch(128);
      auto logits = net->forward(tasks[t].permute(x.to(dev)));
      auto ce = torch::nn::functional::cross_entropy(logits, y.to(dev));
      auto pen = cl::ewc_penalty(net, fishers, anchors);
      auto objective = ce + lambda / 2 * pen;
      opt.zero_grad();
      objective.backward();
      opt.step();
      // OK(torch-loss-accumulation-graph): detached before summing.
      epoch_penalty += pen.detach();
      // BUG(torch-loss-accumulation-graph): the objective's graph is kept in
      // a map that lives for the whole task.
      task_stats["objective"] += objective;
      if (step % 500 == 0)
        // OK(torch-host-sync-in-loop): every 500 steps.
        std::cout << "task " << t << " step " << step << " ce " << ce.item<float>() << "\n";
    }
    std::cout << "task " << t << " mean penalty " << (epoch_penalty / 2000).item<float>() << " objective "
              << (task_stats["objective"] / 2000).item<float>() << "\n";

    fishers.push_back(cl::fisher_diag(net, tasks[t], dev, 200));
    cl::ParamMap anchor;
    for (auto &p : net->named_parameters())
      anchor.emplace(p.key(), p.value().detach().clone());
    anchors.push_back(anchor);

    // Accuracy on every task seen so far.
    net->eval();
    torch::NoGradGuard ng;
    for (size_t s = 0; s <= t; ++s) {
      auto [xv, yv] = cl::batch(1000);
      // OK(torch-inference-without-no-grad): under the guard.
      auto pred = net->forward(tasks[s].permute(xv.to(dev))).argmax(1);
      // BUG(torch-device-mismatch): the labels were never moved; the
      // predictions are on `dev`.
      auto acc = (pred == yv).to(torch::kFloat).mean();
      std::cout << "  after task " << t << " acc on " << s << ": " << acc.item<float>() << "\n";
    }
    net->train();
  }

  // Export the last anchors for a later run; the checkpoint is kept on the host.
  std::vector<torch::Tensor> flat;
  for (auto &kv : anchors.back()) {
    auto host = kv.second.to(torch::kCPU);
    // BUG(torch-tensor-to-discarded): contiguous() does not change `host`.
    host.contiguous();
    flat.push_back(host.view(-1));
  }
  torch::save(torch::cat(flat), "ewc_anchor.pt");
  return 0;
}
