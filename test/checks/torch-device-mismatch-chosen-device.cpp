// RUN: %check_torch_tidy %s torch-device-mismatch %t
//
// A device the function chose (a global's, a global struct's field) met
// with a value the callers handed over untouched (a member of `*this`): the
// statement or call inside the method is the one to fix, not each call of
// the method. And a mask whose rank a shape-keeping method (`triu`) keeps
// is no 0-dim scalar.

#include <torch/torch.h>

struct RunConfig {
  torch::Device device{torch::kCPU};
  int steps = 3;
};
RunConfig g_config;
torch::Device g_device(torch::kCPU);

// The '*' mixes them; the '+' of its result is that same mismatch.
torch::Tensor decode(const torch::Tensor &anchors, const torch::Tensor &offsets) {
  return anchors + offsets * anchors;
}

struct NetImpl : torch::nn::Module {
  NetImpl() { fc = register_module("fc", torch::nn::Linear(4, 4)); }
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Net);

class Detector {
public:
  Detector() : anchors_(torch::zeros({4})) { net_->to(g_config.device); }
  torch::Tensor loss(const torch::Tensor &x) {
    auto out = net_->forward(x.to(g_config.device));
    // The anchors stayed on the CPU since the constructor: reported here,
    // at the call of decode() in this method, not at fit()'s call of loss().
    auto boxes = decode(anchors_, out);
    // CHECK-MESSAGES: :[[@LINE-1]]:18: warning: 'decode()' combines 'out' on 'device' with 'anchors_' on CPU (from 'Detector' at {{.*}}) in operator '*'{{.*}}[torch-device-mismatch]
    return boxes.sum();
  }
  torch::Tensor shifted(const torch::Tensor &x) {
    auto out = net_->forward(x.to(g_device));
    return out + bias_;
    // CHECK-MESSAGES: :[[@LINE-1]]:16: warning: operator '+' combines 'out' on 'device' with 'bias_' on CPU{{.*}}[torch-device-mismatch]
  }

private:
  Net net_;
  torch::Tensor anchors_;
  torch::Tensor bias_ = torch::ones({4});
};

void fit(Detector &d) {
  for (int i = 0; i < g_config.steps; ++i) {
    auto l = d.loss(torch::ones({4}));
    l.backward();
    auto s = d.shifted(torch::ones({4}));
  }
}

// A causal mask built on the CPU: triu() keeps its two dimensions.
torch::Tensor lookahead_mask(int64_t frames) {
  return torch::ones({frames, frames}).triu(1);
}

void attend(Net &net, torch::Device device) {
  auto scores = net->forward(torch::ones({4, 4}).to(device));
  auto masked = scores.masked_fill(lookahead_mask(4), -1e9);
  // CHECK-MESSAGES: :[[@LINE-1]]:24: warning: 'masked_fill()' combines 'scores' on 'device' with 'lookahead_mask(4)' on CPU{{.*}}[torch-device-mismatch]
  // The mask moved next to the scores: fine.
  auto ok = scores.masked_fill(lookahead_mask(4).to(scores.device()), -1e9);
}

// A window function is a factory: on the CPU unless told otherwise.
class Spectrogram {
public:
  explicit Spectrogram(torch::Device device)
      : device_(device), window_(torch::hann_window(4)) {}
  torch::Tensor operator()(const torch::Tensor &frames) {
    auto on_device = frames.to(device_);
    return on_device * window_;
    // CHECK-MESSAGES: :[[@LINE-1]]:22: warning: operator '*' combines 'on_device' on 'device' with 'window_' on CPU{{.*}}[torch-device-mismatch]
  }

private:
  torch::Device device_;
  torch::Tensor window_;
};
void spectrograms(torch::Device device) {
  Spectrogram spec(device);
  spec(torch::ones({4}));
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  g_config.device = device;
  g_device = device;
  Detector d;
  fit(d);
  Net net;
  net->to(device);
  attend(net, device);
  spectrograms(device);
}

