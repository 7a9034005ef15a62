// Multi-object tracking by detection: a small re-identification network embeds
// each detection crop and predicts the box motion to the next frame. Offline
// it is trained on crops of labelled tracks (the step helper returns the loss
// and the box error as a pair, metrics go into a MetricTracker keyed by name);
// online the motion head is adapted per sequence, and the tracker associates
// detections with tracks on the host from embeddings read back through pinned
// staging buffers.
#include <ATen/cuda/CUDAEvent.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace mot {

constexpr int64_t kEmb = 64, kMaxDet = 32, kHist = 8;

struct ReidNetImpl : nn::Module {
  ReidNetImpl()
      : backbone(register_module("backbone", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(3, 16, 3).stride(2).padding(1)),
                                                            nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(16, 32, 3).stride(2).padding(1)),
                                                            nn::ReLU(), nn::AdaptiveAvgPool2d(1), nn::Flatten()))),
        embed(register_module("embed", nn::Linear(32, kEmb))),
        motion(register_module("motion", nn::Linear(kHist * 4, 4))) {}

  torch::Tensor embed_crops(const torch::Tensor &crops) { return F::normalize(embed->forward(backbone->forward(crops)), F::NormalizeFuncOptions().dim(1)); }

  nn::Sequential backbone;
  nn::Linear embed, motion;
};
TORCH_MODULE(ReidNet);

struct TrackBatch {
  torch::Tensor crops;     // B x 3 x 64 x 32
  torch::Tensor ids;       // B, track identity
  torch::Tensor history;   // B x kHist*4, past box deltas
  torch::Tensor next;      // B x 4, next box delta
  bool first_of_sequence = false;
};

TrackBatch synth_batch(int64_t b, bool first) {
  auto ids = torch::randint(0, 8, {b}, torch::kLong);
  auto crops = torch::randn({b, 3, 64, 32}) + ids.to(torch::kFloat).view({b, 1, 1, 1}) * 0.1;
  auto history = 0.05 * torch::randn({b, kHist * 4});
  return {crops, ids, history, history.narrow(1, (kHist - 1) * 4, 4) * 0.9, first};
}

// Running sums of named scalars, read once per epoch.
class MetricTracker {
 public:
  MetricTracker(std::vector<std::string> keys, torch::Device device) : keys_(std::move(keys)), device_(device) { reset(); }

  void reset() {
    for (const auto &k : keys_) sums_[k] = torch::zeros({}, torch::TensorOptions().device(device_));
    count_ = 0;
  }
  void update(const std::string &key, const torch::Tensor &value) {
    // OK(torch-loss-accumulation-graph): every caller hands a value without a graph (.data(), or computed under no-grad).
    sums_.at(key) += value;
  }
  void tick() { ++count_; }
  double mean(const std::string &key) const { return sums_.at(key).item<double>() / static_cast<double>(count_ ? count_ : 1); }

 private:
  std::vector<std::string> keys_;
  torch::Device device_;
  std::map<std::string, torch::Tensor> sums_;
  int64_t count_ = 0;
};

// Adam with gradient clipping; every update leaves the gradients cleared.
class ClippedAdam {
 public:
  ClippedAdam(std::vector<torch::Tensor> params, double lr, double max_norm)
      : params_(params), opt_(std::move(params), torch::optim::AdamOptions(lr)), max_norm_(max_norm) {}
  void apply() {
    nn::utils::clip_grad_norm_(params_, max_norm_);
    // OK(torch-missing-zero-grad): the wrapper clears the gradients right after its own step.
    opt_.step();
    opt_.zero_grad();
  }

 private:
  std::vector<torch::Tensor> params_;
  torch::optim::Adam opt_;
  double max_norm_;
};

// Batch-hard-free contrastive loss on identities plus motion regression.
std::pair<torch::Tensor, torch::Tensor> train_step(ReidNet &net, ClippedAdam &opt, const TrackBatch &b, torch::Device device) {
  auto ids = b.ids.to(device);
  auto emb = net->embed_crops(b.crops.to(device));
  auto same = ids.unsqueeze(0).eq(ids.unsqueeze(1)).to(torch::kFloat);
  auto sim = emb.matmul(emb.t()) / 0.1;
  auto id_loss = F::binary_cross_entropy_with_logits(sim, same);
  auto pred = net->motion->forward(b.history.to(device));
  auto target = b.next.to(device);
  auto loss = id_loss + F::smooth_l1_loss(pred, target);
  loss.backward();
  opt.apply();
  torch::Tensor box_l1;
  {
    torch::NoGradGuard no_grad;
    box_l1 = (pred - target).abs().mean();
  }
  return {loss, box_l1};
}

// Online adaptation of the motion head on the frames of a running sequence.
void adapt_motion(ReidNet &net, const std::vector<TrackBatch> &frames, torch::Device device, std::vector<torch::Tensor> &trail) {
  torch::optim::SGD opt(net->motion->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
  for (const auto &f : frames) {
    if (f.first_of_sequence) net->motion->zero_grad();
    auto pred = net->motion->forward(f.history.to(device));
    auto loss = F::smooth_l1_loss(pred, f.next.to(device));
    loss.backward();
    // BUG(torch-missing-zero-grad): gradients are cleared only when a new sequence starts, so within a sequence every step re-applies the earlier frames' gradients.
    opt.step();
    // BUG(torch-host-sync-in-loop): the prediction trail is pulled to the host on every adaptation step.
    trail.push_back(pred.detach().cpu());
  }
}

class OnlineTracker {
 public:
  OnlineTracker(ReidNet net, torch::Device device)
      : net_(std::move(net)), device_(device),
        host_emb_(torch::empty({kMaxDet, kEmb}, torch::TensorOptions().pinned_memory(device.is_cuda()))),
        host_box_(torch::empty({kMaxDet, 4}, torch::TensorOptions().pinned_memory(device.is_cuda()))),
        gallery_(torch::zeros({0, kEmb})) {}

  int64_t step(const TrackBatch &dets) {
    torch::NoGradGuard no_grad;
    const int64_t n = dets.crops.size(0);
    auto emb = net_->embed_crops(dets.crops.to(device_));
    auto delta = net_->motion->forward(dets.history.to(device_));
    torch::Tensor host_emb = host_emb_.narrow(0, 0, n);
    host_emb.copy_(emb, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the association reads the embeddings before the copy from the device has landed.
    const int64_t matched = associate(host_emb);
    torch::Tensor host_box = host_box_.narrow(0, 0, n);
    host_box.copy_(delta, /*non_blocking=*/true);
    if (device_.is_cuda()) box_ready_.record();
    if (device_.is_cuda()) box_ready_.synchronize();
    // OK(torch-non-blocking-d2h-race): the event recorded after the box copy was waited on.
    auto boxes = host_box.accessor<float, 2>();
    for (int64_t i = 0; i < n; ++i) motion_norm_ += std::abs(boxes[i][0]) + std::abs(boxes[i][1]);
    return matched;
  }
  double motion_norm() const { return motion_norm_; }

 private:
  int64_t associate(const torch::Tensor &emb) {
    int64_t matched = 0;
    if (gallery_.size(0) > 0) matched = (emb.matmul(gallery_.t()).amax(1) > 0.7).sum().item<int64_t>();
    gallery_ = torch::cat({gallery_, emb.clone()}).narrow(0, 0, std::min<int64_t>(gallery_.size(0) + emb.size(0), 256));
    return matched;
  }

  ReidNet net_;
  torch::Device device_;
  torch::Tensor host_emb_, host_box_, gallery_;
  at::cuda::CUDAEvent box_ready_;
  double motion_norm_ = 0.0;
};

}  // namespace mot

int main() {
  using namespace mot;
  torch::manual_seed(360);
  // OK(torch-cuda-unguarded): CUDA only when available.
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  ReidNet net;
  net->to(device);
  ClippedAdam opt(net->parameters(), 3e-4, 5.0);
  MetricTracker metrics({"loss", "box_l1"}, device);

  std::vector<float> curve;
  auto log_curve = [&](const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): the curve logger is called on every step and reads the loss from the device.
    curve.push_back(loss.item<float>());
  };
  auto print_progress = [&](int64_t step, const torch::Tensor &loss) {
    // OK(torch-host-sync-in-loop): the loop calls this only every 50 steps.
    std::cout << "step " << step << " loss " << loss.item<double>() << '\n';
  };

  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    metrics.reset();
    std::vector<torch::Tensor> window;
    for (int64_t step = 0; step < 200; ++step) {
      auto out = train_step(net, opt, synth_batch(48, false), device);
      metrics.update("loss", out.first.data());
      metrics.update("box_l1", out.second);
      metrics.tick();
      log_curve(out.first);
      if (step % 50 == 0) print_progress(step, out.first);
      // BUG(torch-loss-accumulation-graph): the returned loss still holds its graph; 200 graphs are kept for the stack below.
      window.push_back(out.first);
    }
    // OK(torch-host-sync-in-loop): one read per epoch, outside the training loop.
    const double last_window = torch::stack(window).narrow(0, 150, 50).mean().item<double>();
    std::cout << "epoch " << epoch << " loss " << metrics.mean("loss") << " box " << metrics.mean("box_l1")
              << " last-50 " << last_window << '\n';
  }

  {
    torch::NoGradGuard no_grad;
    auto val_total = torch::zeros({}, device);
    for (int64_t i = 0; i < 20; ++i) {
      auto b = synth_batch(32, false);
      auto pred = net->motion->forward(b.history.to(device));
      // OK(torch-loss-accumulation-graph): validation runs under a NoGradGuard; no graph is recorded.
      val_total += F::smooth_l1_loss(pred, b.next.to(device));
    }
    std::cout << "val motion loss " << (val_total / 20).item<double>() << '\n';
  }

  std::vector<TrackBatch> frames;
  for (int64_t t = 0; t < 60; ++t) frames.push_back(synth_batch(12, t % 20 == 0));
  std::vector<torch::Tensor> trail;
  adapt_motion(net, frames, device, trail);

  OnlineTracker tracker(net, device);
  int64_t matched = 0;
  for (const auto &f : frames) matched += tracker.step(f);
  std::cout << "matched " << matched << " motion " << tracker.motion_norm() << " trail " << trail.size() << '\n';
  return 0;
}
