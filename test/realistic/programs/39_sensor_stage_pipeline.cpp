// Sensor-fusion activity classifier. Raw windows (time x channels) come from
// a ring of host buffers; preprocessing is a chain of small stage functors
// (Standardize, ClipOutliers, Downsample) glued together with compose().
// Some windows carry a validity mask for dropped-out channels and some carry
// a precomputed camera embedding; both are std::optional fields.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

constexpr int64_t kTime = 64;
constexpr int64_t kChannels = 9;
constexpr int64_t kEmbed = 16;
constexpr int64_t kClasses = 6;

struct Window {
  torch::Tensor signal;               // [kTime, kChannels]
  std::optional<torch::Tensor> mask;  // [kTime, kChannels], 1 = valid
  std::optional<torch::Tensor> embedding;
  int64_t label = 0;
};

struct Standardize {
  torch::Tensor mean, stddev;
  torch::Tensor operator()(const torch::Tensor &x) const { return (x - mean) / stddev; }
};

struct ClipOutliers {
  double limit;
  torch::Tensor operator()(const torch::Tensor &x) const { return x.clamp(-limit, limit); }
};

struct Downsample {
  int64_t factor;
  torch::Tensor operator()(const torch::Tensor &x) const { return x.slice(/*dim=*/-2, 0, x.size(-2), factor); }
};

template <typename First, typename Second>
struct Composed {
  First first;
  Second second;
  torch::Tensor operator()(const torch::Tensor &x) const { return second(first(x)); }
};

template <typename First, typename Second>
Composed<First, Second> compose(First first, Second second) {
  return {std::move(first), std::move(second)};
}

struct FusionNetImpl : torch::nn::Module {
  FusionNetImpl()
      : temporal(register_module("temporal", torch::nn::Linear(kChannels, 32))),
        fuse(register_module("fuse", torch::nn::Linear(32 + kEmbed, kClasses))) {}
  torch::Tensor forward(torch::Tensor signal, torch::Tensor embedding) {
    auto pooled = torch::relu(temporal(signal)).mean(/*dim=*/1);
    return fuse(torch::cat({pooled, embedding}, /*dim=*/1));
  }
  torch::nn::Linear temporal, fuse;
};
TORCH_MODULE(FusionNet);

// Starts an asynchronous upload; overlaps only when 'host' is pinned.
torch::Tensor upload(const torch::Tensor &host, torch::Device device) {
  return host.to(device, /*non_blocking=*/true);
}

Window read_window(std::vector<float> &ring, int64_t slot, bool with_mask) {
  Window w;
  w.signal = torch::from_blob(ring.data() + slot * kTime * kChannels, {kTime, kChannels}, torch::kFloat).clone();
  if (with_mask)
    w.mask = (torch::rand({kTime, kChannels}) > 0.05).to(torch::kFloat);
  if (slot % 4 == 0)
    w.embedding = torch::randn({1, kEmbed});
  w.label = slot % kClasses;
  return w;
}

void report_class_histogram(const torch::Tensor &hist) {
  auto h = hist.accessor<float, 1>();
  for (int64_t c = 0; c < hist.size(0); ++c)
    std::cout << "class " << c << ": " << h[c] << '\n';
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  std::vector<float> ring(static_cast<size_t>(128 * kTime * kChannels));
  for (size_t i = 0; i < ring.size(); ++i)
    ring[i] = static_cast<float>((i * 7919) % 1000) / 500.0f - 1.0f;

  auto calib = torch::from_blob(ring.data(), {128 * kTime, kChannels}, torch::kFloat);
  auto preprocess = compose(compose(Standardize{calib.mean(0), calib.std(0)}, ClipOutliers{4.0}), Downsample{2});

  FusionNet net;
  net->to(device);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto no_camera = torch::zeros({1, kEmbed}, device);

  for (int64_t step = 0; step < 500; ++step) {
    const int64_t slot = step % 128;
    Window w = read_window(ring, slot, step % 3 == 0);

    // BUG(torch-non-blocking-pageable): read_window() returns a clone of a
    // from_blob view, plain pageable memory; upload() asks for non_blocking.
    auto signal = upload(w.signal, device);
    if (w.mask) {
      // BUG(torch-device-mismatch): the optional mask was made on the CPU by
      // read_window(); the uploaded signal is on 'device'.
      signal = signal * *w.mask;
    }
    // BUG(torch-device-mismatch): the Standardize stage holds the calibration
    // mean and stddev on the CPU and is handed a window on 'device'.
    auto features = preprocess(signal);
    // OK(torch-device-mismatch): the camera embedding is moved before use.
    auto embedding = w.embedding ? w.embedding->to(device) : no_camera;

    auto logits = net->forward(features.unsqueeze(0), embedding);
    auto target = torch::full({1}, w.label, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto loss = torch::nn::functional::cross_entropy(logits, target);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }

  // Class histogram over the whole ring, uploaded from pinned buffers.
  {
    torch::NoGradGuard no_grad;
    net->eval();
    auto hist = torch::zeros({kClasses}, device);
    for (int64_t slot = 0; slot < 128; ++slot) {
      auto staged = preprocess(read_window(ring, slot, false).signal).pin_memory();
      // OK(torch-non-blocking-pageable): preprocessed on the host, then
      // pinned, so this upload overlaps.
      auto x = upload(staged, device);
      auto probs = net->forward(x.unsqueeze(0), no_camera).softmax(1);
      hist += probs.squeeze(0);
    }
    auto hist_host = (hist / 128).to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the histogram is handed to the report
    // before the copy back from 'device' is known to have finished.
    report_class_histogram(hist_host);
  }
  return 0;
}
