// Beehive health monitor: classifies 2-second windows of hive audio (64 mel
// bands x 32 frames) as queenright, queenless or pre-swarm. The trainer
// binds its own member functions into std::function slots (std::bind for the
// micro step, a lambda for validation) so the field team can swap in a
// distillation step later, keeps its per-step hooks in a member vector of
// lambdas, and accumulates gradients over several micro-batches because the
// Jetson in the apiary only fits 8 windows at a time. A small RAII scope,
// declared in the epoch loop, puts the network into eval() for validation
// and back into train() when the block ends.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kMels = 64, kFrames = 32, kStates = 3;
const char* const kStateNames[kStates] = {"queenright", "queenless", "pre-swarm"};

struct HiveNetImpl : nn::Module {
  HiveNetImpl()
      : conv1(register_module("conv1", nn::Conv1d(nn::Conv1dOptions(kMels, 96, 5).padding(2)))),
        bn1(register_module("bn1", nn::BatchNorm1d(96))),
        conv2(register_module("conv2", nn::Conv1d(nn::Conv1dOptions(96, 128, 3).padding(1)))),
        bn2(register_module("bn2", nn::BatchNorm1d(128))),
        drop(register_module("drop", nn::Dropout(0.3))),
        head(register_module("head", nn::Linear(128, kStates))) {}

  torch::Tensor forward(torch::Tensor x) {  // [B, mels, frames]
    x = torch::relu(bn1(conv1(x)));
    x = torch::relu(bn2(conv2(x)));
    return head(drop(x.mean(2)));
  }

  nn::Conv1d conv1;
  nn::BatchNorm1d bn1;
  nn::Conv1d conv2;
  nn::BatchNorm1d bn2;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(HiveNet);

struct Window {
  torch::Tensor mel;    // [B, mels, frames]
  torch::Tensor state;  // [B]
};

// A hum whose band rises with the colony's agitation, plus wind noise.
std::vector<Window> record_windows(int64_t batches, int64_t batch, torch::Device device) {
  std::vector<Window> out;
  auto bands = torch::arange(kMels, device).to(torch::kFloat).view({1, kMels, 1});
  for (int64_t b = 0; b < batches; ++b) {
    auto state = torch::randint(kStates, {batch}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto centre = (12 + 16 * state).to(torch::kFloat).view({batch, 1, 1});
    auto hum = torch::exp(-(bands - centre).pow(2) / 18.0).expand({batch, kMels, kFrames});
    out.push_back({hum + 0.25 * torch::randn({batch, kMels, kFrames}, device), state});
  }
  return out;
}

// Puts a module into eval() for its scope and back into train() after.
class EvalScope {
 public:
  explicit EvalScope(nn::Module& m) : m_(m) { m_.eval(); }
  ~EvalScope() { m_.train(); }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  nn::Module& m_;
};

struct TrainerOptions {
  int64_t micro_per_step = 4;
  int64_t log_every = 50;
  double lr = 1e-3;
};

class HiveTrainer {
 public:
  using StepFn = std::function<torch::Tensor(const Window&)>;
  using EvalFn = std::function<double(const std::vector<Window>&)>;
  using Hook = std::function<void(int64_t, const torch::Tensor&)>;

  HiveTrainer(HiveNet net, TrainerOptions opts)
      : net_(std::move(net)), opts_(opts), opt_(net_->parameters(), torch::optim::AdamOptions(opts.lr)) {
    step_ = std::bind(&HiveTrainer::micro_step, this, std::placeholders::_1);
    validate_ = [this](const std::vector<Window>& val) { return accuracy(val); };
    const int64_t every = opts_.log_every;
    hooks_.push_back([every](int64_t micro, const torch::Tensor& loss) {
      if (micro % every == 0)
        // OK(torch-host-sync-in-loop): read once every log_every micro-steps.
        std::cout << "  micro " << micro << " loss " << loss.item<double>() << '\n';
    });
    hooks_.push_back([this](int64_t, const torch::Tensor& loss) {
      // BUG(torch-loss-accumulation-graph): the hook keeps every micro-step's
      // loss, graph and all, in a member that lives for the whole epoch.
      epoch_losses_.push_back(loss);
    });
  }

  void fit(const std::vector<Window>& train, const std::vector<Window>& val, int64_t epochs) {
    net_->train();
    opt_.zero_grad();
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      epoch_losses_.clear();
      for (const auto& w : train) {
        auto loss = step_(w);
        for (auto& hook : hooks_)
          hook(micro_, loss);
      }
      double acc = 0;
      {
        EvalScope scope(*net_);
        acc = validate_(val);
      }
      auto mean_loss = torch::stack(epoch_losses_).mean().item<double>();
      std::cout << "epoch " << epoch << " loss " << mean_loss << " val acc " << acc << '\n';
    }
  }

  HiveNet& net() { return net_; }

 private:
  torch::Tensor micro_step(const Window& w) {
    auto loss = F::cross_entropy(net_->forward(w.mel), w.state);
    // BUG(torch-grad-accumulation-unscaled): opts_.micro_per_step mean losses
    // are summed into .grad() before each step; the loss is never divided.
    loss.backward();
    if (++micro_ % opts_.micro_per_step == 0) {
      // OK(torch-missing-zero-grad): reset right after the step, same condition.
      opt_.step();
      opt_.zero_grad();
    }
    return loss;
  }

  double accuracy(const std::vector<Window>& val) {
    torch::NoGradGuard no_grad;
    int64_t correct = 0, total = 0;
    for (const auto& w : val) {
      // OK(torch-eval-mode-missing, torch-inference-without-no-grad): fit()
      // holds an EvalScope around this call; a guard is in scope.
      auto pred = net_->forward(w.mel).argmax(1);
      correct += pred.eq(w.state).sum().item<int64_t>();
      total += w.state.size(0);
    }
    return static_cast<double>(correct) / static_cast<double>(total);
  }

  HiveNet net_;
  TrainerOptions opts_;
  torch::optim::Adam opt_;
  StepFn step_;
  EvalFn validate_;
  std::vector<Hook> hooks_;
  std::vector<torch::Tensor> epoch_losses_;
  int64_t micro_ = 0;
};

// Field use: one recording from a hive scale, labelled for the beekeeper.
std::string classify_recording(HiveNet& net, const torch::Tensor& mel) {
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): the EvalScope in fit() put the network
  // back into train(); nothing switches it to eval() before field use.
  auto probs = torch::softmax(net->forward(mel.unsqueeze(0)), 1).squeeze(0);
  return kStateNames[probs.argmax().item<int64_t>()];
}

int main() {
  torch::manual_seed(172);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  HiveNet net;
  net->to(device);

  TrainerOptions opts;
  opts.micro_per_step = 4;
  HiveTrainer trainer(net, opts);
  auto train = record_windows(120, 8, device);
  auto val = record_windows(12, 32, device);
  trainer.fit(train, val, 10);

  auto field = record_windows(1, 1, device).front();
  std::cout << "hive 7 sounds " << classify_recording(trainer.net(), field.mel[0]) << '\n';
  torch::save(trainer.net(), "hive_net.pt");
}
