// An image-free "digits parity" classifier whose driver is a small state
// machine: the loop runs forever and a switch over the current phase decides
// what one turn does (warm-up step, training step, validation sweep, report,
// done). A step timer closes every turn so that the phases can be profiled.
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <iostream>

enum class Phase { kWarmup, kTrain, kValidate, kReport, kDone };

struct ParityNetImpl : torch::nn::Module {
  ParityNetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(32, 128))),
        drop(register_module("drop", torch::nn::Dropout(0.2))),
        fc2(register_module("fc2", torch::nn::Linear(128, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(drop(torch::relu(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(ParityNet);

// Measures wall time per turn. The timer must see the GPU's work finished,
// so every lap waits for the device.
class StepTimer {
 public:
  void lap() {
    // BUG(torch-host-sync-in-loop): run() calls lap() at the end of every
    // turn, training turns included; each one drains the GPU queue.
    torch::cuda::synchronize();
    auto now = std::chrono::steady_clock::now();
    total_ms_ += std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    ++laps_;
  }
  double mean_ms() const { return laps_ == 0 ? 0.0 : total_ms_ / static_cast<double>(laps_); }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  double total_ms_ = 0;
  int64_t laps_ = 0;
};

std::pair<torch::Tensor, torch::Tensor> parity_batch(int64_t n) {
  auto bits = torch::randint(0, 2, {n, 32});
  auto labels = bits.sum(1).remainder(2);
  return {bits.to(torch::kFloat), labels};
}

struct Schedule {
  int64_t warmup_steps = 50;
  int64_t steps_per_round = 400;
  int64_t rounds = 5;
  int64_t val_batches = 20;
};

void run(const Schedule &sched) {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  ParityNet net;
  net->to(device);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3));

  Phase phase = Phase::kWarmup;
  int64_t step = 0, round = 0;
  double last_acc = 0;
  auto round_loss = torch::zeros({}, device);
  StepTimer timer;

  while (true) {
    switch (phase) {
      case Phase::kWarmup: {
        auto [x, y] = parity_batch(64);
        double scale = static_cast<double>(step + 1) / static_cast<double>(sched.warmup_steps);
        for (auto &group : opt.param_groups())
          static_cast<torch::optim::AdamWOptions &>(group.options()).lr(1e-3 * scale);
        auto loss = torch::nn::functional::cross_entropy(net->forward(x.to(device)), y.to(device));
        opt.zero_grad();
        loss.backward();
        opt.step();
        if (++step == sched.warmup_steps) {
          step = 0;
          phase = Phase::kTrain;
        }
        break;
      }
      case Phase::kTrain: {
        auto [x, y] = parity_batch(64);
        auto logits = net->forward(x.to(device));
        auto loss = torch::nn::functional::cross_entropy(logits, y.to(device));
        opt.zero_grad();
        loss.backward();
        opt.step();
        // BUG(torch-loss-accumulation-graph): round_loss lives across turns;
        // every step's graph stays attached to it until the report.
        round_loss += loss;
        if (++step == sched.steps_per_round) {
          step = 0;
          phase = Phase::kValidate;
        }
        break;
      }
      case Phase::kValidate: {
        net->eval();
        int64_t correct = 0, seen = 0;
        for (int64_t i = 0; i < sched.val_batches; ++i) {
          auto [x, y] = parity_batch(256);
          // BUG(torch-inference-without-no-grad): the validation sweep runs
          // no backward and holds no NoGradGuard.
          auto logits = net->forward(x.to(device));
          correct += logits.argmax(1).eq(y.to(device)).sum().item<int64_t>();
          seen += 256;
        }
        last_acc = static_cast<double>(correct) / static_cast<double>(seen);
        net->train();
        phase = Phase::kReport;
        break;
      }
      case Phase::kReport: {
        // OK(torch-host-sync-in-loop): only the report turn reads the loss,
        // once per round.
        double mean = round_loss.item<double>() / static_cast<double>(sched.steps_per_round);
        std::cout << "round " << round << " loss " << mean << " acc " << last_acc << " ms/turn "
                  << timer.mean_ms() << '\n';
        round_loss = torch::zeros({}, device);
        phase = ++round == sched.rounds ? Phase::kDone : Phase::kTrain;
        break;
      }
      case Phase::kDone:
        return;
    }
    timer.lap();
  }
}

int main() {
  Schedule sched;
  sched.rounds = 3;
  run(sched);
  return 0;
}
