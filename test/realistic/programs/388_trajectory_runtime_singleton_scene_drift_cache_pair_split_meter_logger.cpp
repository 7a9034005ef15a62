// Pedestrian trajectory prediction (ETH/UCY style): an LSTM encoder reads the
// observed displacements of every agent in a scene and a linear head predicts
// the next 12 positions relative to the last observation. A process-wide
// Runtime picks the device once and hands out tensor options; the trainer,
// the per-scene priors and the evaluator all ask it. Each scene has a goal
// drift prior cached by scene id; the trainer keeps ADE/FDE sums in a meter,
// mines hard agents for a replay pass, and reports through a Logger.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nn = torch::nn;

namespace traj {

constexpr int64_t kObs = 8, kPred = 12, kHidden = 64;

class Runtime {
 public:
  static const Runtime &get() {
    static const Runtime rt;
    return rt;
  }
  const torch::Device &device() const { return device_; }
  torch::TensorOptions options() const { return torch::TensorOptions().dtype(torch::kFloat).device(device_); }

 private:
  Runtime() : device_(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU) {}
  torch::Device device_;
};

struct Track {
  int64_t scene_id;
  torch::Tensor xy;  // A x (kObs + kPred) x 2, world coordinates in metres
};

Track synth_track(int64_t scene_id, int64_t agents) {
  auto start = torch::randn({agents, 1, 2}) * 5.0;
  auto vel = torch::randn({agents, 1, 2}) * 0.4;
  auto t = torch::arange(kObs + kPred, torch::kFloat).view({1, -1, 1});
  auto bend = torch::sin(t * 0.2 + static_cast<double>(scene_id)) * 0.1;
  return {scene_id, start + vel * t + bend + torch::randn({agents, kObs + kPred, 2}) * 0.02};
}

// Model input: the observed displacements, on the runtime device.
// Ground truth: the future positions relative to the last observed one.
std::pair<torch::Tensor, torch::Tensor> split_track(const Track &track) {
  auto observed = track.xy.slice(1, 0, kObs);
  auto deltas = observed.slice(1, 1, kObs) - observed.slice(1, 0, kObs - 1);
  auto future = track.xy.slice(1, kObs) - observed.select(1, kObs - 1).unsqueeze(1);
  return {deltas.to(Runtime::get().device()), future};
}

struct TrajNetImpl : nn::Module {
  TrajNetImpl()
      : embed(register_module("embed", nn::Linear(2, 32))),
        enc(register_module("enc", nn::LSTM(nn::LSTMOptions(32, kHidden).batch_first(true)))),
        head(register_module("head", nn::Linear(kHidden, kPred * 2))) {}

  // deltas: A x (kObs - 1) x 2 -> positions A x kPred x 2 relative to the last observation
  torch::Tensor forward(const torch::Tensor &deltas) {
    auto out = std::get<0>(enc->forward(torch::relu(embed->forward(deltas))));
    return head->forward(out.select(1, out.size(1) - 1)).view({-1, kPred, 2}).cumsum(1);
  }

  nn::Linear embed;
  nn::LSTM enc;
  nn::Linear head;
};
TORCH_MODULE(TrajNet);

// Per-scene goal drift (kPred x 2), estimated offline from the scene's
// walkable area; looked up once per scene and kept.
class ScenePriors {
 public:
  torch::Tensor drift(int64_t scene_id) {
    if (drift_.count(scene_id) == 0) drift_[scene_id] = torch::full({kPred, 2}, 0.01 * static_cast<double>(scene_id % 5));
    return drift_.at(scene_id);
  }
  torch::Tensor drift_on(int64_t scene_id, const torch::Device &device) { return drift(scene_id).to(device); }

 private:
  std::unordered_map<int64_t, torch::Tensor> drift_;
};

// Running displacement errors of an epoch, summed on the device.
struct DisplacementMeter {
  explicit DisplacementMeter(const torch::TensorOptions &opts)
      : ade_sum(torch::zeros({}, opts)), fde_sum(torch::zeros({}, opts)) {}

  void update(const torch::Tensor &pred, const torch::Tensor &gt) {
    auto disp = (pred - gt).norm(2, -1);  // A x kPred
    // BUG(torch-loss-accumulation-graph): pred is the live model output of each step; the ADE sum keeps every step's graph.
    ade_sum += disp.mean();
    // OK(torch-loss-accumulation-graph): the final displacement is detached before it is summed.
    fde_sum += disp.select(1, kPred - 1).mean().detach();
    ++batches;
  }

  torch::Tensor ade_sum, fde_sum;
  int64_t batches = 0;
};

class Logger {
 public:
  explicit Logger(std::string run) : run_(std::move(run)) {}
  void log(const std::string &key, const torch::Tensor &value) {
    // BUG(torch-host-sync-in-loop): the trainer logs the loss on every step; item() waits for the GPU each time.
    series_[key].push_back(value.item<float>());
  }
  void flush(int64_t epoch) {
    for (auto &kv : series_) {
      double sum = 0.0;
      for (float v : kv.second) sum += v;
      std::cout << run_ << " epoch " << epoch << ' ' << kv.first << ' ' << sum / (kv.second.empty() ? 1.0 : static_cast<double>(kv.second.size())) << '\n';
      kv.second.clear();
    }
  }

 private:
  std::string run_;
  std::map<std::string, std::vector<float>> series_;
};

class Trainer {
 public:
  Trainer(TrajNet model, Logger &logger)
      : model_(std::move(model)), logger_(logger), opt_(model_->parameters(), torch::optim::AdamOptions(1e-3)) {
    model_->to(Runtime::get().device());
    // Dataset statistics of the displacements (metres per frame), x and y.
    normalise_ = [scale = torch::tensor({0.35, 0.42})](const torch::Tensor &d) { return d / scale; };
  }

  void train_epoch(const std::vector<Track> &tracks, int64_t epoch) {
    model_->train();
    hard_agents_.clear();
    DisplacementMeter meter(Runtime::get().options());
    int64_t step = 0;
    for (const auto &track : tracks) {
      auto [obs, future] = split_track(track);
      // OK(torch-device-mismatch): the trainer moves the ground truth itself.
      const auto target = future.to(Runtime::get().device());
      opt_.zero_grad();
      // BUG(torch-device-mismatch): the normaliser's scale was captured on the CPU; obs is on the runtime device.
      auto pred = model_->forward(normalise_(obs));
      // BUG(torch-device-mismatch): the scene drift was cached on the host; pred is on the runtime device.
      pred = pred + priors_.drift(track.scene_id);
      auto per_agent = torch::smooth_l1_loss(pred, target, torch::Reduction::None).mean({1, 2});
      auto loss = per_agent.mean();
      loss.backward();
      opt_.step();
      meter.update(pred, target);
      logger_.log("loss", loss);
      // BUG(torch-loss-accumulation-graph): the two worst agents keep their live losses for the replay pass.
      hard_agents_.push_back(std::get<0>(per_agent.topk(2)));
      // OK(torch-host-sync-in-loop): printed every 50 steps only.
      if (++step % 50 == 0) std::cout << "epoch " << epoch << " step " << step << " loss " << loss.item<double>() << '\n';
    }
    std::cout << "train ADE " << (meter.ade_sum / static_cast<double>(meter.batches)).item<double>() << " FDE "
              << (meter.fde_sum / static_cast<double>(meter.batches)).item<double>() << " hard " << hard_agents_.size() << '\n';
  }

  TrajNet &model() { return model_; }
  ScenePriors &priors() { return priors_; }

 private:
  TrajNet model_;
  Logger &logger_;
  torch::optim::Adam opt_;
  ScenePriors priors_;
  std::function<torch::Tensor(const torch::Tensor &)> normalise_;
  std::vector<torch::Tensor> hard_agents_;
};

class Evaluator {
 public:
  Evaluator() : device_(Runtime::get().device()), scale_(torch::tensor({0.35, 0.42}).to(device_)) {}

  // ADE of the model and of a constant-velocity baseline.
  std::pair<double, double> ade(TrajNet &model, const std::vector<Track> &tracks, ScenePriors &priors) {
    torch::NoGradGuard no_grad;
    model->eval();
    auto model_sum = torch::zeros({}, torch::TensorOptions().device(device_));
    auto cv_sum = torch::zeros({}, torch::TensorOptions().device(device_));
    for (const auto &track : tracks) {
      auto [obs, future] = split_track(track);
      const auto gt = future.to(device_);
      // OK(torch-device-mismatch): the scale was moved in the constructor and the drift is asked for on the evaluator's device.
      auto pred = model->forward(obs / scale_) + priors.drift_on(track.scene_id, device_);
      // OK(torch-loss-accumulation-graph): under NoGradGuard nothing records a graph.
      model_sum += (pred - gt).norm(2, -1).mean();
      // Constant velocity: repeat the last observed displacement.
      auto cv = obs.narrow(1, kObs - 2, 1).expand({-1, kPred, 2}).cumsum(1);
      // BUG(torch-device-mismatch): the baseline is built from obs on the runtime device but compared with the raw future, still on the CPU.
      cv_sum += (cv - future).norm(2, -1).mean();
    }
    const auto n = static_cast<double>(tracks.size());
    // OK(torch-host-sync-in-loop): two reads after the loop.
    return {model_sum.item<double>() / n, cv_sum.item<double>() / n};
  }

 private:
  torch::Device device_;
  torch::Tensor scale_;
};

}  // namespace traj

int main() {
  using namespace traj;
  torch::manual_seed(388);
  std::vector<Track> train, val;
  for (int64_t i = 0; i < 96; ++i) train.push_back(synth_track(i % 6, 16));
  for (int64_t i = 0; i < 12; ++i) val.push_back(synth_track(i % 6, 16));

  Logger logger("eth-ucy");
  Trainer trainer(TrajNet(), logger);
  Evaluator evaluator;
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    trainer.train_epoch(train, epoch);
    logger.flush(epoch);
    const auto [model_ade, cv_ade] = evaluator.ade(trainer.model(), val, trainer.priors());
    std::cout << "val ADE " << model_ade << " (constant velocity " << cv_ade << ")\n";
  }
  return 0;
}
