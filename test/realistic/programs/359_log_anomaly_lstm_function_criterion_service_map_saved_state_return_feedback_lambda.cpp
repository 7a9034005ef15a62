// Anomaly detection in service logs (DeepLog style): Drain-parsed log lines
// become template ids, an LSTM learns to predict the next template from the
// previous ten, and a window whose real next event falls outside the top-k is
// an anomaly. The trainer's criterion is a std::function chosen in its
// constructor (label smoothing or not); incidents are fine-tuned in float16;
// k is calibrated in bfloat16 under a RAII guard; the on-call's "false alarm"
// feedback is learned online by a lambda the detector keeps.
// LibTorch 1.13 and 2.x.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

#if TORCH_VERSION_MAJOR >= 2
#define LOG_AMP_SET(on) at::autocast::set_autocast_enabled(at::kCUDA, (on))
#define LOG_AMP_ENABLED() at::autocast::is_autocast_enabled(at::kCUDA)
#define LOG_AMP_SET_DTYPE(t) at::autocast::set_autocast_dtype(at::kCUDA, (t))
#define LOG_AMP_DTYPE() at::autocast::get_autocast_dtype(at::kCUDA)
#else
#define LOG_AMP_SET(on) at::autocast::set_enabled(on)
#define LOG_AMP_ENABLED() at::autocast::is_enabled()
#define LOG_AMP_SET_DTYPE(t) at::autocast::set_autocast_gpu_dtype(t)
#define LOG_AMP_DTYPE() at::autocast::get_autocast_gpu_dtype()
#endif

constexpr int64_t kTemplates = 320, kWindow = 10, kMinWindow = 4;
constexpr double kFeedbackScale = 512.0;  // static loss scale of the online updates
const std::array<std::string, 4> kServices = {"auth", "billing", "gateway", "scheduler"};

struct LogLSTMImpl : nn::Module {
  LogLSTMImpl()
      : embed(register_module("embed", nn::Embedding(kTemplates, 64))),
        lstm(register_module("lstm", nn::LSTM(nn::LSTMOptions(64, 128).num_layers(2).dropout(0.2).batch_first(true)))),
        drop(register_module("drop", nn::Dropout(0.2))),
        out(register_module("out", nn::Linear(128, kTemplates))) {}
  // template ids [B, W] -> next-template logits [B, 320]
  torch::Tensor forward(const torch::Tensor& events) {
    auto states = std::get<0>(lstm->forward(embed(events)));
    return out(drop(states.select(1, -1)));
  }
  nn::Embedding embed;
  nn::LSTM lstm;
  nn::Dropout drop;
  nn::Linear out;
};
TORCH_MODULE(LogLSTM);

struct Window {
  torch::Tensor events, next;  // [B, W] and [B] template ids
  std::string service;
};

std::vector<Window> make_windows(int64_t n, int64_t batch, torch::Device device) {
  std::vector<Window> out;
  for (int64_t i = 0; i < n; ++i)
    out.push_back({torch::randint(0, kTemplates, {batch, kWindow}, device), torch::randint(0, kTemplates, {batch}, device),
                   kServices[static_cast<size_t>(i) % kServices.size()]});
  return out;
}

struct TrainConfig {
  int64_t accum = 4;  // windows per optimizer step
  double lr = 1e-3, label_smoothing = 0.0;
};

class NextEventTrainer {
 public:
  NextEventTrainer(LogLSTM net, const TrainConfig& cfg, torch::Device device)
      : net_(std::move(net)), opt_(net_->parameters(), torch::optim::AdamOptions(cfg.lr)), accum_(cfg.accum), device_(device) {
    if (cfg.label_smoothing > 0.0) {
      const double ls = cfg.label_smoothing;
      criterion_ = [ls](const torch::Tensor& logits, const torch::Tensor& next) {
        return F::cross_entropy(logits, next, F::CrossEntropyFuncOptions().label_smoothing(ls));
      };
    } else {
      criterion_ = [](const torch::Tensor& logits, const torch::Tensor& next) { return F::cross_entropy(logits, next); };
    }
  }

  void epoch(const std::vector<Window>& windows) {
    net_->train();
    opt_.zero_grad();
    std::map<std::string, torch::Tensor> service_loss;
    for (const auto& s : kServices) service_loss[s] = torch::zeros({}, torch::TensorOptions().device(device_));
    int64_t seen = 0;
    for (const auto& w : windows) {
      auto loss = criterion_(net_->forward(w.events), w.next);
      // BUG(torch-grad-accumulation-unscaled): either criterion reduces by
      // the mean, and the step below runs once every accum_ windows.
      loss.backward();
      // BUG(torch-loss-accumulation-graph): the per-service totals outlive
      // the epoch's iterations and keep every window's graph.
      service_loss[w.service] += loss;
      if (++seen % accum_ == 0) {
        opt_.step();
        opt_.zero_grad();
      }
    }
    for (const auto& kv : service_loss) std::cout << kv.first << ": " << kv.second.item<double>() << '\n';
  }

 private:
  LogLSTM net_;
  torch::optim::Adam opt_;
  int64_t accum_;
  torch::Device device_;
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> criterion_;
};

struct StepOut {
  torch::Tensor loss, logits;
};

StepOut next_event_step(LogLSTM& net, const Window& w) {
  auto logits = net->forward(w.events);
  return {F::cross_entropy(logits, w.next), logits};
}

// The windows of a postmortem's incident, learned with priority.
void fine_tune_incident(LogLSTM& net, const std::vector<Window>& incident) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(2e-4));
  net->train();
  for (const auto& w : incident) {
    opt.zero_grad();
    LOG_AMP_SET(true);
    StepOut out = next_event_step(net, w);
    LOG_AMP_SET(false);
    // BUG(torch-autocast-region): the loss field comes from a float16 region
    // (the default dtype) and reaches backward() with no loss scale.
    out.loss.backward();
    opt.step();
  }
}

// bfloat16 autocast for a scope; restores the switch and the dtype it found.
class Bf16Autocast {
 public:
  Bf16Autocast() : was_on_(LOG_AMP_ENABLED()), was_dtype_(LOG_AMP_DTYPE()) {
    LOG_AMP_SET_DTYPE(at::kBFloat16);
    LOG_AMP_SET(true);
  }
  ~Bf16Autocast() {
    LOG_AMP_SET(was_on_);
    LOG_AMP_SET_DTYPE(was_dtype_);
  }
 private:
  bool was_on_;
  at::ScalarType was_dtype_;
};

// Smallest k whose top-k covers 99% of the normal validation traffic.
int64_t calibrate_k(LogLSTM& net, const std::vector<Window>& val) {
  torch::NoGradGuard no_grad;
  // OK(torch-autocast-region): the guard restores autocast on the early return.
  Bf16Autocast amp;
  for (int64_t k : {1, 3, 5, 9}) {
    int64_t hits = 0, total = 0;
    for (const auto& w : val) {
      auto topk = std::get<1>(net->forward(w.events).topk(k, -1));
      hits += (topk == w.next.unsqueeze(1)).any(1).sum().item<int64_t>();
      total += w.next.size(0);
    }
    if (hits >= 0.99 * static_cast<double>(total)) return k;
  }
  return 9;
}

class Detector {
 public:
  Detector(LogLSTM net, int64_t k) : net_(std::move(net)), k_(k), opt_(net_->parameters(), torch::optim::SGDOptions(1e-4)) {
    on_false_alarm_ = [this](const Window& w) {
      net_->train();
      opt_.zero_grad();
      LOG_AMP_SET(true);
      auto loss = F::cross_entropy(net_->forward(w.events), w.next) * kFeedbackScale;
      // BUG(torch-autocast-region): the online update back-propagates before
      // the region is switched off.
      loss.backward();
      LOG_AMP_SET(false);
      for (auto& p : net_->parameters())
        if (p.grad().defined()) p.grad().div_(kFeedbackScale);
      opt_.step();
      net_->eval();
    };
  }

  // One flag per window of the batch: the real next event is not in the top-k.
  std::vector<bool> score(const Window& w) {
    torch::NoGradGuard no_grad;
    const bool was_on = LOG_AMP_ENABLED();
    // BUG(torch-autocast-region): a window shorter than kMinWindow returns
    // without restoring was_on.
    LOG_AMP_SET(true);
    if (w.events.size(1) < kMinWindow) return std::vector<bool>(static_cast<size_t>(w.events.size(0)), false);
    auto topk = std::get<1>(net_->forward(w.events).topk(k_, -1));
    auto hit = (topk == w.next.unsqueeze(1)).any(1).cpu();
    LOG_AMP_SET(was_on);
    std::vector<bool> flags;
    for (int64_t i = 0; i < hit.size(0); ++i) flags.push_back(!hit[i].item<bool>());
    return flags;
  }

  void feedback(const Window& w) { on_false_alarm_(w); }

 private:
  LogLSTM net_;
  int64_t k_;
  torch::optim::SGD opt_;
  std::function<void(const Window&)> on_false_alarm_;
};

int main(int argc, char** argv) {
  torch::manual_seed(359);
  // OK(torch-cuda-unguarded): guarded selection.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  TrainConfig cfg;
  if (argc > 1) cfg.label_smoothing = std::stod(argv[1]);

  LogLSTM net;
  net->to(device);
  NextEventTrainer trainer(net, cfg, device);
  auto normal = make_windows(80, 32, device);
  for (int epoch = 0; epoch < 3; ++epoch) trainer.epoch(normal);
  fine_tune_incident(net, make_windows(10, 16, device));

  net->eval();
  const int64_t k = calibrate_k(net, make_windows(10, 32, device));
  Detector detector(net, k);
  int64_t alarms = 0;
  std::vector<Window> false_alarms;  // bursts the on-call dismissed
  for (const auto& w : make_windows(20, 8, device)) {
    auto flags = detector.score(w);
    const auto flagged = std::count(flags.begin(), flags.end(), true);
    alarms += flagged;
    if (flagged > 4) false_alarms.push_back(w);
  }
  for (const auto& w : false_alarms) detector.feedback(w);
  std::cout << "k = " << k << ", " << alarms << " anomalous windows\n";
}
