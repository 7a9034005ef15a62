// RUN: %check_torch_tidy %s torch-host-sync-in-loop %t

#include <torch/torch.h>
#include <algorithm>
#include <array>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 2)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

torch::Tensor next_input();
torch::Tensor next_target();
void log_value(float v);
struct StepLR {
  void step();
};

// --- Positives -------------------------------------------------------------

void classic_loss_item() {
  Net model;
  model->to(torch::kCUDA);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  float total = 0;
  for (int step = 0; step < 1000; ++step) {
    auto output = model->forward(next_input().to(torch::kCUDA));
    auto loss = torch::nn::functional::mse_loss(output, next_target().to(torch::kCUDA));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    total += loss.item<float>();
    // CHECK-MESSAGES: :[[@LINE-1]]:19: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step; the GPU idles while the host waits; sync under a condition (e.g. every N steps) or accumulate on the device [torch-host-sync-in-loop]
    // CHECK-MESSAGES: :[[@LINE-4]]:10: note: inside this training loop, which calls 'backward()'
  }
}

void print_cuda_loss() {
  Net model;
  model->to(torch::kCUDA);
  torch::optim::Adam optimizer(model->parameters());
  for (int step = 0; step < 1000; ++step) {
    auto loss = model->forward(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    std::cout << "loss " << loss << "\n";
    // CHECK-MESSAGES: :[[@LINE-1]]:26: warning: printing 'loss' copies it to the host and synchronises with the GPU on every training step; the GPU idles while the host waits; print under a condition (e.g. every N steps) or accumulate on the device
  }
}

void cpu_copy_of_predictions(std::vector<torch::Tensor> &history) {
  auto w = torch::randn({4, 2}, torch::kCUDA);
  torch::optim::SGD optimizer({w}, 0.01);
  for (int step = 0; step < 100; ++step) {
    auto pred = next_input().cuda().matmul(w);
    pred.sum().backward();
    optimizer.step();
    history.push_back(pred.cpu());
    // CHECK-MESSAGES: :[[@LINE-1]]:28: warning: 'pred.cpu()' synchronises the host with the GPU on every training step
  }
}

void to_cpu(std::vector<torch::Tensor> &history) {
  auto w = torch::randn({4, 2}, torch::kCUDA);
  torch::optim::SGD optimizer({w}, 0.01);
  for (int step = 0; step < 100; ++step) {
    auto loss = next_input().cuda().matmul(w).mean();
    loss.backward();
    optimizer.step();
    history.push_back(loss.to(torch::kCPU));
    // CHECK-MESSAGES: :[[@LINE-1]]:28: warning: 'loss.to(torch::kCPU)' synchronises the host with the GPU on every training step
  }
}

void synchronize_every_step(Net &model, torch::optim::Optimizer &optimizer) {
  for (int step = 0; step < 100; ++step) {
    model->forward(next_input()).sum().backward();
    optimizer.step();
    torch::cuda::synchronize();
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: 'torch::cuda::synchronize()' blocks the host until the GPU is idle on every training step; the GPU idles while the host launches the next kernels; synchronise under a condition (e.g. every N steps) or not at all
    // CHECK-MESSAGES: :[[@LINE-4]]:40: note: inside this training loop, which calls 'backward()'
  }
}

void symbolic_device(bool use_gpu) {
  torch::Device device(use_gpu ? torch::kCUDA : torch::kCPU);
  Net model;
  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 100; ++step) {
    auto loss = torch::nn::functional::mse_loss(model->forward(next_input().to(device)),
                                                next_target().to(device));
    loss.backward();
    optimizer.step();
    log_value(loss.item<float>());
    // CHECK-MESSAGES: :[[@LINE-1]]:20: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step where 'device' is CUDA; the GPU idles
  }
}

void data_loader_loop() {
  Net model;
  model->to(torch::kCUDA);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  auto loader = torch::data::make_data_loader(
      torch::data::datasets::MNIST("data").map(torch::data::transforms::Stack<>()), 64);
  double running = 0;
  for (auto &batch : *loader) {
    auto output = model->forward(batch.data.to(torch::kCUDA));
    auto loss = torch::nn::functional::nll_loss(output, batch.target.to(torch::kCUDA));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
    running += loss.item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:21: warning: 'loss.item<double>()' synchronises
  }
}

void condition_of_a_while_loop(torch::optim::Optimizer &optimizer) {
  auto w = torch::ones({4}, torch::kCUDA);
  auto loss = w.sum();
  while (loss.item<float>() > 0.01f) {
    // CHECK-MESSAGES: :[[@LINE-1]]:15: warning: 'loss.item<float>()' synchronises
    loss = (w * w).sum();
    loss.backward();
    optimizer.step();
  }
}

void left_of_and_runs_every_step(torch::optim::Optimizer &optimizer, bool verbose) {
  auto w = torch::ones({4}, torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    auto loss = w.matmul(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    if (loss.item<float>() > 10.0f && verbose)
      // CHECK-MESSAGES: :[[@LINE-1]]:14: warning: 'loss.item<float>()' synchronises
      std::cout << "diverging\n";
  }
}

void exit_before_sync_still_every_step(torch::optim::Optimizer &optimizer) {
  auto w = torch::ones({4}, torch::kCUDA);
  for (int step = 0;; ++step) {
    if (step == 1000)
      break;
    auto loss = w.matmul(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    try {
      log_value(loss.item<float>());
      // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: 'loss.item<float>()' synchronises
    } catch (...) {
    }
  }
}

#define LOG_LOSS(x) do { log_value((x).item<float>()); } while (0)

void statement_macro(torch::optim::Optimizer &optimizer) {
  auto w = torch::ones({4}, torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    auto loss = w.matmul(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    LOG_LOSS(loss);
    // CHECK-MESSAGES: :[[@LINE-1]]:5: warning: '.item()' synchronises
  }
}

// --- Negatives -------------------------------------------------------------

void every_n_steps(Net &model, torch::optim::Optimizer &optimizer) {
  model->to(torch::kCUDA);
  for (int step = 0; step < 1000; ++step) {
    auto loss = model->forward(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    if (step % 100 == 0)
      std::cout << "step " << step << " loss " << loss.item<float>() << "\n";
  }
}

void continue_before_logging(Net &model, torch::optim::Optimizer &optimizer) {
  model->to(torch::kCUDA);
  for (int step = 0; step < 1000; ++step) {
    auto loss = model->forward(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    if (step % 100 != 0)
      continue;
    std::cout << loss << "\n";
    torch::cuda::synchronize();
  }
}

void ternary_and_right_of_and(Net &model, torch::optim::Optimizer &optimizer,
                              bool verbose) {
  model->to(torch::kCUDA);
  for (int step = 0; step < 1000; ++step) {
    auto loss = model->forward(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    float shown = verbose ? loss.item<float>() : 0.0f;
    bool big = verbose && loss.item<float>() > 1.0f;
    switch (step % 10) {
    case 0:
      log_value(loss.item<float>());
      break;
    default:
      break;
    }
  }
}

void accumulate_on_device_item_per_epoch(Net &model, torch::optim::Optimizer &optimizer) {
  model->to(torch::kCUDA);
  for (int epoch = 0; epoch < 10; ++epoch) {
    auto epoch_loss = torch::zeros({}, torch::kCUDA);
    for (int step = 0; step < 1000; ++step) {
      auto loss = model->forward(next_input().cuda()).sum();
      loss.backward();
      optimizer.step();
      epoch_loss += loss.detach();
    }
    std::cout << "epoch " << epoch << " loss " << epoch_loss.item<float>() << "\n";
    torch::cuda::synchronize();
  }
}

void evaluation_loop_is_not_training(Net &model) {
  model->to(torch::kCUDA);
  torch::NoGradGuard no_grad;
  double correct = 0;
  for (int i = 0; i < 100; ++i) {
    auto out = model->forward(next_input().cuda());
    correct += out.argmax(1).eq(next_target().cuda()).sum().item<double>();
    std::cout << out << "\n";
  }
}

void cpu_model(torch::optim::Optimizer &optimizer) {
  Net model;
  for (int step = 0; step < 100; ++step) {
    auto loss = torch::nn::functional::mse_loss(model->forward(next_input()), next_target());
    loss.backward();
    optimizer.step();
    log_value(loss.item<float>());
    std::cout << loss << "\n";
    auto host = loss.cpu();
  }
}

void unknown_device(torch::Tensor loss, torch::optim::Optimizer &optimizer) {
  for (int step = 0; step < 100; ++step) {
    loss.backward();
    optimizer.step();
    log_value(loss.item<float>());
  }
}

void not_a_sync(torch::optim::Optimizer &optimizer, std::vector<torch::Tensor> &out) {
  auto w = torch::ones({4}, torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    auto loss = w.matmul(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    out.push_back(loss.to(torch::kCUDA));
    out.push_back(loss.to(torch::kCPU, /*non_blocking=*/true));
    out.push_back(loss.to(torch::kFloat));
  }
}

void scheduler_step_is_not_training(StepLR &scheduler) {
  auto w = torch::ones({4}, torch::kCUDA);
  for (int epoch = 0; epoch < 10; ++epoch) {
    scheduler.step();
    log_value(w.sum().item<float>());
  }
}

void lambda_in_loop(torch::optim::Optimizer &optimizer) {
  auto w = torch::ones({4}, torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    auto loss = w.matmul(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    auto report = [&] { log_value(loss.item<float>()); };
    (void)report;
  }
}

void inner_loop_with_default_depth(Net &model, torch::optim::Optimizer &optimizer,
                                   int logs) {
  model->to(torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    auto loss = model->forward(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    // A nested loop that may not run: not a level of the default depth.
    for (int k = 0; k < logs; ++k)
      log_value(loss.item<float>());
  }
}

// A nested loop sure to run its body runs it on every step: a counting loop
// between constants, a range-for over a std::array or a braced list.
void inner_loops_that_always_run(Net &model, torch::optim::Optimizer &optimizer) {
  model->to(torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    auto out = model->forward(next_input().cuda());
    auto loss = out.sum();
    loss.backward();
    optimizer.step();
    for (int k = 0; k < 3; ++k)
      log_value(loss.item<float>());
    // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step
    std::array<torch::Tensor, 2> parts{loss, out.mean()};
    for (const torch::Tensor &part : parts)
      log_value(part.item<float>());
    // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: 'part.item<float>()' synchronises
    std::vector<torch::Tensor> maybe_empty{loss};
    for (const torch::Tensor &part : maybe_empty)
      log_value(part.item<float>());
  }
}

// A lambda a library algorithm runs over a range gets the range's elements;
// pairs in a braced std::array keep their parts.
void algorithm_over_per_step_values(Net &model, torch::optim::Optimizer &optimizer) {
  model->to(torch::kCUDA);
  std::vector<double> history;
  for (int step = 0; step < 100; ++step) {
    auto out = model->forward(next_input().cuda());
    auto loss = out.sum();
    loss.backward();
    optimizer.step();
    std::vector<torch::Tensor> heads{loss, out.mean()};
    std::for_each(heads.begin(), heads.end(), [&](const torch::Tensor &h) {
      history.push_back(h.item<double>());
      // CHECK-MESSAGES: :[[@LINE-1]]:27: warning: 'h.item<double>()' synchronises
    });
    std::array<std::pair<std::string, torch::Tensor>, 2> named{
        {{"loss", loss}, {"mean", out.mean()}}};
    std::for_each(named.begin(), named.end(),
                  [&](const std::pair<std::string, torch::Tensor> &kv) {
                    history.push_back(kv.second.item<double>());
                    // CHECK-MESSAGES: :[[@LINE-1]]:49: warning: 'kv.second.item<double>()' synchronises
                  });
    std::vector<int> sizes{1, 2};
    std::for_each(sizes.begin(), sizes.end(), [&](int) {
      history.push_back(out.sum().item<double>());
      // CHECK-MESSAGES: :[[@LINE-1]]:35: warning: 'out.sum().item<double>()' synchronises
    });
  }
}

void catch_handler(Net &model, torch::optim::Optimizer &optimizer) {
  model->to(torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    auto loss = model->forward(next_input().cuda()).sum();
    try {
      loss.backward();
      optimizer.step();
    } catch (const std::exception &) {
      std::cout << loss << "\n";
    }
  }
}

void suppressed(Net &model, torch::optim::Optimizer &optimizer) {
  model->to(torch::kCUDA);
  for (int step = 0; step < 100; ++step) {
    auto loss = model->forward(next_input().cuda()).sum();
    loss.backward();
    optimizer.step();
    log_value(loss.item<float>()); // NOLINT(torch-host-sync-in-loop)
  }
}

void sync_before_the_loop(Net &model, torch::optim::Optimizer &optimizer) {
  model->to(torch::kCUDA);
  auto first = model->forward(next_input().cuda()).sum();
  for (float l = first.item<float>(); l > 0; l -= 1) {
    first.backward();
    optimizer.step();
  }
}

// A torch::Device held by pointer is a device variable like one held by
// value; a pointer to a known device is that device.
#include <memory>
struct PointerTrainer {
  torch::Device *device = nullptr;
  std::shared_ptr<torch::Device> shared;
  Net model;
  void fit(torch::optim::SGD &opt) {
    for (int i = 0; i < 100; ++i) {
      auto loss = model->forward(torch::randn({2, 4}).to(*device)).sum();
      opt.zero_grad();
      loss.backward();
      opt.step();
      std::cout << loss.item<double>();
      // CHECK-MESSAGES: :[[@LINE-1]]:25: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
    }
  }
  void fit_shared(torch::optim::SGD &opt) {
    for (int i = 0; i < 100; ++i) {
      auto loss = model->forward(torch::randn({2, 4}).to(*shared)).sum();
      opt.zero_grad();
      loss.backward();
      opt.step();
      std::cout << loss.item<double>();
      // CHECK-MESSAGES: :[[@LINE-1]]:25: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step where 'shared' is CUDA{{.*}}[torch-host-sync-in-loop]
    }
  }
};
void fit_on_host(Net &model, torch::optim::SGD &opt) {
  torch::Device host(torch::kCPU);
  torch::Device *where = &host;
  for (int i = 0; i < 100; ++i) {
    auto loss = model->forward(torch::randn({2, 4}, *where)).sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
    std::cout << loss.item<double>();
  }
}

// A module's parameters, and a LibTorch module's weight, are where the
// module is: a gradient norm read every step syncs.
double grad_norm(torch::nn::Linear &net) {
  auto total = torch::zeros({}, net->weight.device());
  for (auto &p : net->parameters())
    total = total + p.grad().pow(2).sum();
  return total.item<double>();
  // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: 'total.item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
}
void train_with_norms(torch::Device device) {
  torch::nn::Linear net(4, 2);
  net->to(device);
  torch::optim::SGD opt(net->parameters(), 0.1);
  double s = 0;
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    net->forward(torch::randn({8, 4}, device)).sum().backward();
    s += grad_norm(net);
    if (i % 10 == 0)
      s += net->weight.grad().sum().item<double>();
    opt.step();
  }
  torch::nn::Linear host(4, 2);
  for (int i = 0; i < 10; ++i) {
    opt.zero_grad();
    host->forward(torch::randn({8, 4})).sum().backward();
    s += host->weight.grad().sum().item<double>();
    opt.step();
  }
}

// An element of a tensor (`out[0]`) is a view of it: on its device.
void first_image_to_host(torch::Device device, Net &net, torch::optim::SGD &opt) {
  for (int i = 0; i < 10; ++i) {
    auto out = net->forward(torch::randn({2, 4}, device));
    opt.zero_grad();
    out.sum().backward();
    opt.step();
    auto image = out[0].to(torch::kCPU);
    // CHECK-MESSAGES: :[[@LINE-1]]:25: warning: 'out[0].to(torch::kCPU)' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
  }
}

// An iteration that `continue`s before it trains is no training step: the
// read after the step still runs on every step that trains.
void warm_up_then_read(torch::Device device, Net &net, torch::optim::SGD &opt,
                       std::vector<torch::Tensor> &buffer) {
  for (int i = 0; i < 1000; ++i) {
    buffer.push_back(torch::randn({2, 4}));
    if (buffer.size() < 100)
      continue;
    auto loss = net->forward(torch::randn({2, 4}, device)).sum();
    opt.zero_grad();
    loss.backward();
    opt.step();
    double seen = loss.item<double>();
    // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: 'loss.item<double>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
    if (i % 100 == 0)
      std::cout << loss.item<double>() << "\n";
  }
}

// A value of an operation that mixes devices (reported by
// torch-device-mismatch) is where the fix computes it: on the accelerator.
void read_after_mismatch(torch::Device device, Net &net, torch::optim::SGD &opt) {
  for (int i = 0; i < 10; ++i) {
    auto out = net->forward(torch::randn({2, 4}, device));
    auto weighted = out * torch::rand({2, 2});
    opt.zero_grad();
    weighted.sum().backward();
    opt.step();
    auto active = (weighted > 0).sum().item<int64_t>();
    // CHECK-MESSAGES: :[[@LINE-1]]:40: warning: '(weighted > 0).sum().item<int64_t>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
  }
}

// A helper that combines three of its parameters: its result is on their
// device (if the operation runs, they share one).
torch::Tensor margin_loss(const torch::Tensor &a, const torch::Tensor &b,
                          const torch::Tensor &same) {
  auto d = (a - b).pow(2).sum(1);
  return (same * d + (1 - same) * torch::relu(1.0 - d)).mean();
}

void read_three_operand_loss(torch::Device device, Net &net, torch::optim::SGD &opt) {
  for (int i = 0; i < 10; ++i) {
    auto a = net->forward(torch::randn({2, 4}, device));
    auto b = net->forward(torch::randn({2, 4}, device));
    auto loss = margin_loss(a, b, torch::ones({2}, device));
    opt.zero_grad();
    loss.backward();
    opt.step();
    float value = loss.item<float>();
    // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
  }
}

// A running value that is a parameter on one path and that parameter combined
// with another on the other path stays on the first one's device.
torch::Tensor gated_sum(const torch::Tensor &x, const torch::Tensor &gate, int steps) {
  auto acc = x;
  for (int t = 0; t < steps; ++t)
    acc = acc + gate * x;
  return acc.mean();
}

void read_loop_joined_helper(torch::Device device, Net &net, torch::optim::SGD &opt) {
  for (int i = 0; i < 10; ++i) {
    auto loss = gated_sum(net->forward(torch::randn({2, 4}, device)),
                          torch::ones({1}, device), 3);
    opt.zero_grad();
    loss.backward();
    opt.step();
    float value = loss.item<float>();
    // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: 'loss.item<float>()' synchronises the host with the GPU on every training step where 'device' is CUDA{{.*}}[torch-host-sync-in-loop]
  }
}

