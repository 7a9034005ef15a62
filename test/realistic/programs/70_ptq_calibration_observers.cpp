// Post-training quantisation calibration for a small keyword-spotting CNN:
// the float model runs over calibration clips, a MinMax observer per layer
// (held in a std::map by layer name) tracks the activation range, and the
// ranges become int8 scales and zero points written to a JSON-like file.
// Calibration runs on the second GPU of the export node, so it does not
// compete with the training job on the first one.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

struct KwsNetImpl : torch::nn::Module {
  KwsNetImpl()
      : conv1(register_module("conv1", torch::nn::Conv1d(torch::nn::Conv1dOptions(40, 64, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv1d(torch::nn::Conv1dOptions(64, 64, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(64, 12))) {}

  // Returns the logits and the named activations the observers watch.
  std::pair<torch::Tensor, std::vector<std::pair<std::string, torch::Tensor>>> forward(torch::Tensor x) {
    std::vector<std::pair<std::string, torch::Tensor>> taps;
    x = torch::relu(conv1->forward(x));
    taps.emplace_back("conv1", x);
    x = torch::relu(conv2->forward(x));
    taps.emplace_back("conv2", x);
    auto logits = fc->forward(x.mean(-1));
    taps.emplace_back("fc", logits);
    return {logits, taps};
  }

  torch::nn::Conv1d conv1, conv2;
  torch::nn::Linear fc;
};
TORCH_MODULE(KwsNet);

// Running min/max of one activation; the range starts as host scalars and
// follows the activations' device.
class MinMaxObserver {
 public:
  MinMaxObserver()
      : min_(torch::full({}, std::numeric_limits<float>::infinity())),
        max_(torch::full({}, -std::numeric_limits<float>::infinity())) {}

  void observe(const torch::Tensor &x) {
    min_ = torch::minimum(min_, x.min());
    max_ = torch::maximum(max_, x.max());
  }

  // Asymmetric uint8 parameters for the observed range.
  std::pair<double, int64_t> qparams() const {
    const double lo = std::min(0.0, min_.item<double>());
    const double hi = std::max(0.0, max_.item<double>());
    const double scale = std::max((hi - lo) / 255.0, 1e-8);
    return {scale, static_cast<int64_t>(std::round(-lo / scale))};
  }

 private:
  torch::Tensor min_, max_;
};

std::vector<torch::Tensor> calibration_clips(int64_t n) {
  std::vector<torch::Tensor> clips;
  for (int64_t i = 0; i < n; ++i)
    clips.push_back(torch::randn({8, 40, 98}));  // 8 clips of 98 log-mel frames
  return clips;
}

void write_qparams(const std::map<std::string, MinMaxObserver> &observers, const std::string &path) {
  std::ofstream out(path);
  out << "{\n";
  for (const auto &[name, obs] : observers) {
    auto [scale, zero] = obs.qparams();
    out << "  \"" << name << "\": {\"scale\": " << scale << ", \"zero_point\": " << zero << "},\n";
  }
  out << "}\n";
}

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "calibration needs a GPU\n";
    return 1;
  }
  // BUG(torch-device-index-unchecked): ordinal 1 is never compared with
  // device_count(); on a one-GPU node (or under CUDA_VISIBLE_DEVICES=0)
  // this device does not exist.
  torch::Device device("cuda:1");
  KwsNet net;
  torch::load(net, "kws_float.pt");
  net->to(device);
  net->eval();

  std::map<std::string, MinMaxObserver> observers;
  for (const char *name : {"conv1", "conv2", "fc"})
    observers.emplace(name, MinMaxObserver());

  for (const auto &clip : calibration_clips(64)) {
    // BUG(torch-inference-without-no-grad): calibration only reads the
    // activations, but autograd records every batch.
    // BUG(torch-non-blocking-pageable): the clips were generated in pageable
    // host memory; the flag does not make the upload asynchronous.
    auto [logits, taps] = net->forward(clip.to(device, /*non_blocking=*/true));
    for (auto &[name, act] : taps) {
      // OK(torch-device-mismatch): the observer's 0-dim host range meets the
      // activation's 0-dim minimum as a scalar; the range moves to the GPU.
      observers.at(name).observe(act);
    }
  }
  write_qparams(observers, "kws_qparams.json");

  // Sanity check: the agreement of the float model with itself on a fixed
  // clip after a round trip through the file system.
  KwsNet reloaded;
  torch::load(reloaded, "kws_float.pt");
  reloaded->to(device);
  reloaded->eval();
  torch::NoGradGuard no_grad;
  int64_t agree = 0;
  const auto probe = calibration_clips(4);
  for (const auto &clip : probe) {
    auto x = clip.to(device);
    // OK(torch-inference-without-no-grad): under the guard above.
    auto a = net->forward(x).first.argmax(-1);
    auto b = reloaded->forward(x).first.argmax(-1);
    // OK(torch-device-mismatch): both models and the clip are on 'device'.
    agree += (a == b).sum().item<int64_t>();
  }
  std::cout << "self-agreement " << agree << "/" << 4 * 8 << "\n";
  return 0;
}
