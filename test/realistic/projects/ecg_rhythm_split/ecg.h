// Single-lead ECG arrhythmia classification: 2-second windows at 360 Hz are
// sorted into the five AAMI beat classes (N, S, V, F, Q). Architectures are
// created by name from a registry, trained by a Runner with a logit-adjusted
// loss (the class prior is added to the logits during training), monitored
// by epoch hooks the application registers, compared with an optional
// baseline checkpoint, and finally run on a Holter strip. Split over four
// files: config.cpp (command line, device, synthetic records, step logger),
// models.cpp (the 1-D ResNet and the registry), runner.cpp (training,
// evaluation, asynchronous prediction), main.cpp (the hooks and the run).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

constexpr int64_t kWindow = 720;  // samples per window (2 s at 360 Hz)
constexpr int64_t kClasses = 5;   // AAMI: N, S, V, F, Q
constexpr size_t kPlateauWindow = 50;

struct RunConfig {
  std::string arch = "resnet1d_small";
  std::string baseline_ckpt;  // empty: no baseline comparison
  int64_t epochs = 12;
  int64_t batch = 64;
  int64_t log_every = 200;
  double lr = 1e-3;
  int gpu = 0;
  bool force_cpu = false;
};

struct EcgSplit {
  torch::Tensor signals;  // [N, 1, kWindow] float
  torch::Tensor labels;   // [N] int64 class ids
};

struct EvalReport {
  double accuracy = 0.0;
  double macro_f1 = 0.0;
  torch::Tensor confusion;  // [kClasses, kClasses] host, rows = truth
};

// config.cpp
RunConfig parse_args(int argc, char **argv);
torch::Device select_device(const RunConfig &cfg);
torch::Tensor class_log_prior();                 // [kClasses], host
EcgSplit make_split(int64_t n, uint64_t seed);   // host tensors
torch::Tensor make_holter_strip(int64_t beats, uint64_t seed);

// Smoothed training loss plus a periodic console line.
class StepLogger {
 public:
  explicit StepLogger(int64_t every) : every_(every) {}
  void record(int64_t step, const torch::Tensor &loss, const torch::Tensor &logits, const torch::Tensor &target);
  double smoothed() const { return ema_; }

 private:
  int64_t every_;
  double ema_ = 0.0;
  bool first_ = true;
};

// models.cpp
struct RhythmSpec {
  int64_t width;
  int64_t blocks;
  double dropout;
};

struct RhythmNetImpl : torch::nn::Module {
  explicit RhythmNetImpl(const RhythmSpec &spec);
  // [B, 1, kWindow] -> [B, kClasses] logits
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv1d stem{nullptr};
  torch::nn::BatchNorm1d stem_bn{nullptr};
  torch::nn::Sequential blocks{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::Linear head{nullptr};
};

class ModelRegistry {
 public:
  using Factory = std::function<std::shared_ptr<RhythmNetImpl>()>;
  static ModelRegistry &instance();
  void add(const std::string &name, Factory factory);
  std::shared_ptr<RhythmNetImpl> create(const std::string &name) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, Factory> factories_;
};

// runner.cpp
using EpochHook = std::function<void(RhythmNetImpl &, int64_t)>;

EvalReport evaluate(RhythmNetImpl &net, const EcgSplit &split, torch::Device device);

class Runner {
 public:
  Runner(std::shared_ptr<RhythmNetImpl> model, torch::Device device, const RunConfig &cfg);
  void add_epoch_hook(EpochHook hook) { hooks_.push_back(std::move(hook)); }
  void fit(const EcgSplit &train, const EcgSplit &val);
  EvalReport validate(const EcgSplit &val);
  // Class probabilities of a strip of windows; the copy to the host is
  // started but not waited for.
  torch::Tensor predict_async(const torch::Tensor &strip);
  const std::shared_ptr<RhythmNetImpl> &model() const { return model_; }

 private:
  torch::Tensor train_step(const torch::Tensor &x, const torch::Tensor &y);
  bool plateaued();

  std::shared_ptr<RhythmNetImpl> model_;
  torch::Device device_;
  RunConfig cfg_;
  torch::Tensor log_prior_;
  torch::optim::AdamW opt_;
  StepLogger logger_;
  std::deque<torch::Tensor> recent_;
  std::vector<EpochHook> hooks_;
  double best_recent_ = 1e30;
  int64_t global_step_ = 0;
};
