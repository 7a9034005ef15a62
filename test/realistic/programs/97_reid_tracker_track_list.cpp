// Multi-object tracking by detection: a small heatmap detector finds people
// in each frame, a re-identification network embeds their crops, and a
// tracker matches the embeddings against a gallery of known identities.
// Live tracks are kept in a std::list and pruned through iterators.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <list>
#include <vector>

constexpr int64_t kEmb = 128, kGallery = 256, kMaxDet = 16;

struct DetectorImpl : torch::nn::Module {
  DetectorImpl()
      : c1(register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).stride(2).padding(1)))),
        c2(register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 1, 3).padding(1)))) {}
  torch::Tensor forward(const torch::Tensor &x) { return torch::sigmoid(c2->forward(torch::relu(c1->forward(x)))); }
  torch::nn::Conv2d c1, c2;
};
TORCH_MODULE(Detector);

struct ReidImpl : torch::nn::Module {
  ReidImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).stride(2)))),
        fc(register_module("fc", torch::nn::Linear(32, kEmb))) {}
  torch::Tensor forward(const torch::Tensor &crops) {
    auto h = torch::relu(conv->forward(crops)).mean({2, 3});
    return torch::nn::functional::normalize(fc->forward(h), torch::nn::functional::NormalizeFuncOptions().dim(1));
  }
  torch::nn::Conv2d conv;
  torch::nn::Linear fc;
};
TORCH_MODULE(Reid);

struct Track {
  int64_t id;
  int64_t gallery_slot;
  int missed = 0;
};

// Greedy association of detections (rows of `sim`) to gallery slots.
std::vector<int64_t> associate(const torch::Tensor &sim_host, float thresh) {
  std::vector<int64_t> slot(sim_host.size(0), -1);
  auto acc = sim_host.accessor<float, 2>();
  for (int64_t d = 0; d < sim_host.size(0); ++d) {
    float best = thresh;
    for (int64_t g = 0; g < sim_host.size(1); ++g)
      if (acc[d][g] > best) {
        best = acc[d][g];
        slot[d] = g;
      }
  }
  return slot;
}

class Tracker {
 public:
  explicit Tracker(torch::Device device) : device_(device) {
    reid_->to(device_);
    reid_->eval();
  }

  void update(const torch::Tensor &frame, const torch::Tensor &centres) {
    auto crops = crop(frame, centres);
    // BUG(torch-inference-without-no-grad): update() runs once per frame of
    // the tracking loop, which never calls backward; autograd records the
    // re-identification forward.
    auto emb = reid_->forward(crops);
    // BUG(torch-device-mismatch): the gallery member was created on the host
    // in the class body; the embeddings are on the tracker's device.
    auto sim = torch::matmul(emb, gallery_.t());
    auto sim_host = sim.to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the asynchronous copy is handed to
    // associate() with no synchronisation in between.
    auto slots = associate(sim_host, 0.6f);
    for (size_t d = 0; d < slots.size(); ++d)
      if (slots[d] < 0)
        tracks_.push_back({next_id_++, static_cast<int64_t>(next_id_ % kGallery)});
    for (auto it = tracks_.begin(); it != tracks_.end();) {
      if (++it->missed > 30)
        it = tracks_.erase(it);
      else
        ++it;
    }
  }
  size_t live() const { return tracks_.size(); }

 private:
  torch::Tensor crop(const torch::Tensor &frame, const torch::Tensor &centres) {
    std::vector<torch::Tensor> out;
    for (int64_t k = 0; k < centres.size(0); ++k) {
      const int64_t y = centres[k][0].item<int64_t>(), x = centres[k][1].item<int64_t>();
      out.push_back(frame.narrow(2, std::max<int64_t>(0, y - 16), 32).narrow(3, std::max<int64_t>(0, x - 16), 32));
    }
    return torch::cat(out);
  }

  torch::Device device_;
  Reid reid_;
  torch::Tensor gallery_ = torch::nn::functional::normalize(torch::randn({kGallery, kEmb}),
                                                             torch::nn::functional::NormalizeFuncOptions().dim(1));
  std::list<Track> tracks_;
  int64_t next_id_ = 0;
};

int main() {
  const auto device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  Detector detector;
  detector->to(device);
  detector->eval();
  Tracker tracker(device);

  for (int64_t f = 0; f < 900; ++f) {
    auto frame = torch::rand({1, 3, 256, 256});
    // BUG(torch-tensor-to-discarded): the half-precision copy is dropped;
    // the frame stays float32 on the host.
    frame.to(torch::kHalf);
    auto frame_dev = frame.to(device);
    torch::Tensor centres;
    {
      torch::NoGradGuard no_grad;
      // OK(torch-inference-without-no-grad): the detector runs under the guard.
      auto heat = detector->forward(frame_dev).flatten();
      auto top = heat.topk(kMaxDet);
      auto idx = std::get<1>(top);
      // OK(torch-host-sync-in-loop): a loop that trains nothing.
      centres = torch::stack({idx / 128 * 2, idx % 128 * 2}, 1).cpu();
    }
    tracker.update(frame_dev, centres);
    if (f % 100 == 0)
      std::cout << "frame " << f << " live tracks " << tracker.live() << "\n";
  }
  return 0;
}
