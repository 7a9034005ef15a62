// Camera-trap species classifier served from C++ at the field stations. The
// network is an EfficientNet-B0 traced in Python (torch.jit.trace) and loaded
// with torch::jit::load; requests are single frames or motion-triggered
// bursts (a std::variant), decoded RGB arrives as std::vector<uint8_t>, and a
// per-request latency recorder lives in the dispatch loop.
// Build: cmake -DCMAKE_PREFIX_PATH=/opt/libtorch .. && make species_server
#include <torch/script.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace cfg {
constexpr int64_t kSide = 224;
constexpr int64_t kWarmupIters = 10;
constexpr float kMinScore = 0.35f;
// The station PC drives its display from GPU 0; the model gets the second card.
// BUG(torch-device-index-unchecked): the ordinal 1 is never compared with
// torch::cuda::device_count(); on a one-GPU station this throws at load time.
constexpr const char* kGpuSpec = "cuda:1";
const std::vector<std::string> kSpecies = {"empty", "roe_deer", "wild_boar", "red_fox", "badger",
                                           "hare",  "lynx",     "wolf",      "human",   "vehicle"};
// Site prior: how often each class shows up at this reserve (from last season's labels).
const std::vector<float> kSitePrior = {0.40f, 0.20f, 0.12f, 0.08f, 0.06f, 0.05f, 0.01f, 0.02f, 0.04f, 0.02f};
}  // namespace cfg

#define SERVER_LOG(msg) (std::cerr << "[species-server] " << msg << '\n')

template <class... Ts>
struct overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
overloaded(Ts...) -> overloaded<Ts...>;

struct Frame {
  std::string camera_id;
  int64_t height = 0, width = 0;
  std::vector<uint8_t> rgb;  // HWC, packed
};
struct Burst {
  std::string camera_id;
  std::vector<Frame> frames;
};
using Request = std::variant<Frame, Burst>;

struct Prediction {
  std::string camera_id;
  std::string species;
  float score = 0.f;
};

// Records wall time of one request into sink[key] when it goes out of scope.
class LatencyRecorder {
 public:
  LatencyRecorder(std::map<std::string, std::vector<double>>& sink, std::string key)
      : sink_(sink), key_(std::move(key)), start_(std::chrono::steady_clock::now()) {}
  ~LatencyRecorder() {
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_).count();
    sink_[key_].push_back(static_cast<double>(us) / 1000.0);
  }

 private:
  std::map<std::string, std::vector<double>>& sink_;
  std::string key_;
  std::chrono::steady_clock::time_point start_;
};

// HWC uint8 -> normalised CHW float at kSide x kSide.
torch::Tensor decode(const Frame& f) {
  auto hwc = torch::from_blob(const_cast<uint8_t*>(f.rgb.data()), {f.height, f.width, 3}, torch::kUInt8);
  auto chw = hwc.permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat).div(255.0);
  chw = torch::nn::functional::interpolate(chw, torch::nn::functional::InterpolateFuncOptions()
                                                    .size(std::vector<int64_t>{cfg::kSide, cfg::kSide})
                                                    .mode(torch::kBilinear)
                                                    .align_corners(false));
  static const auto mean = torch::tensor({0.485f, 0.456f, 0.406f}).view({1, 3, 1, 1});
  static const auto stdv = torch::tensor({0.229f, 0.224f, 0.225f}).view({1, 3, 1, 1});
  return ((chw - mean) / stdv).squeeze(0);
}

class SpeciesServer {
 public:
  SpeciesServer(const std::string& path, torch::Device device, bool half)
      : device_(device), half_(half), site_prior_(torch::tensor(cfg::kSitePrior)) {
    try {
      module_ = torch::jit::load(path, device_);
    } catch (const c10::Error& e) {
      throw std::runtime_error("cannot load " + path + ": " + e.what_without_backtrace());
    }
    module_.eval();
    if (half_)
      module_.to(torch::kHalf);
    site_prior_dev_ = site_prior_.to(device_);
  }

  // cuDNN picks its kernels on the first calls; run a few before taking traffic.
  void warmup() {
    auto dummy = torch::zeros({1, 3, cfg::kSide, cfg::kSide}, torch::TensorOptions().device(device_));
    if (half_)
      dummy = dummy.to(torch::kHalf);
    for (int64_t i = 0; i < cfg::kWarmupIters; ++i) {
      // BUG(torch-inference-without-no-grad): the warm-up forwards run with
      // autograd on (traced parameters keep requires_grad) and build graphs.
      module_.forward({dummy});
    }
  }

  Prediction classify(const Frame& frame) {
    c10::InferenceMode guard;
    auto x = decode(frame).unsqueeze(0);
    auto staged = device_.is_cuda() ? x.pin_memory() : x;
    // OK(torch-non-blocking-pageable): pinned whenever the target is CUDA.
    auto input = staged.to(device_, /*non_blocking=*/true);
    if (half_)
      input = input.to(torch::kHalf);
    auto probs = torch::softmax(module_.forward({input}).toTensor().to(torch::kFloat), 1);
    // OK(torch-device-mismatch): the prior copy that lives on the serving device.
    auto weighted = probs * site_prior_dev_;
    auto best = weighted.argmax(1).to(torch::kCPU, /*non_blocking=*/true);
    auto score = weighted.max().to(torch::kCPU, /*non_blocking=*/true);
    if (device_.is_cuda())
      torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised above when the copies are asynchronous.
    const int64_t k = best.item<int64_t>();
    return {frame.camera_id, cfg::kSpecies.at(static_cast<size_t>(k)), score.item<float>()};
  }

  // One prediction per burst: average the class probabilities of its frames.
  Prediction classify(const Burst& burst) {
    c10::InferenceMode guard;
    std::vector<torch::Tensor> images;
    images.reserve(burst.frames.size());
    for (const auto& f : burst.frames)
      images.push_back(decode(f));
    auto batch = torch::stack(images);
    // BUG(torch-non-blocking-pageable): the stacked burst is fresh pageable
    // memory (never pinned), so the "asynchronous" upload is synchronous.
    auto input = batch.to(device_, /*non_blocking=*/true);
    if (half_) {
      // BUG(torch-tensor-to-discarded): the half copy is dropped; the float
      // input then meets the half-precision module.
      input.to(torch::kHalf);
    }
    auto probs = torch::softmax(module_.forward({input}).toTensor().to(torch::kFloat), 1).mean(0, true);
    // BUG(torch-device-mismatch): site_prior_ is the CPU tensor built in the
    // constructor; probs are on the serving device.
    auto weighted = probs * site_prior_;
    auto [scores, idx] = weighted.max(1);
    auto idx_h = idx.to(torch::kCPU, /*non_blocking=*/true);
    auto score_h = scores.to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): read before any synchronisation.
    const int64_t k = idx_h.item<int64_t>();
    // BUG(torch-non-blocking-d2h-race): a second pending copy, read just as early.
    return {burst.camera_id, cfg::kSpecies.at(static_cast<size_t>(k)), score_h.item<float>()};
  }

 private:
  torch::jit::script::Module module_;
  torch::Device device_;
  bool half_;
  torch::Tensor site_prior_;
  torch::Tensor site_prior_dev_;
};

torch::Device pick_device() {
  if (!torch::cuda::is_available())
    return torch::Device(torch::kCPU);
  return torch::Device(cfg::kGpuSpec);
}

std::vector<Request> fake_queue(int64_t n) {
  std::vector<Request> queue;
  for (int64_t i = 0; i < n; ++i) {
    Frame f{"cam-" + std::to_string(i % 7), 480, 640, std::vector<uint8_t>(480 * 640 * 3, static_cast<uint8_t>(i))};
    if (i % 4 == 3)
      queue.emplace_back(Burst{f.camera_id, {f, f, f, f}});
    else
      queue.emplace_back(std::move(f));
  }
  return queue;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: species_server model.ts [--half]\n";
    return 1;
  }
  const torch::Device device = pick_device();
  const bool half = argc > 2 && std::string(argv[2]) == "--half" && device.is_cuda();
  SpeciesServer server(argv[1], device, half);
  server.warmup();

  std::map<std::string, std::vector<double>> latencies;
  std::vector<Prediction> accepted;
  for (const auto& req : fake_queue(64)) {
    LatencyRecorder rec(latencies, std::holds_alternative<Frame>(req) ? "frame" : "burst");
    auto pred = std::visit(overloaded{[&](const Frame& f) { return server.classify(f); },
                                      [&](const Burst& b) { return server.classify(b); }},
                           req);
    if (pred.score < cfg::kMinScore || pred.species == "empty")
      continue;
    SERVER_LOG(pred.camera_id << ": " << pred.species << " (" << pred.score << ")");
    accepted.push_back(std::move(pred));
  }
  for (const auto& [kind, ms] : latencies) {
    double sum = 0.0;
    for (double v : ms)
      sum += v;
    SERVER_LOG(kind << ": " << ms.size() << " requests, mean " << sum / static_cast<double>(ms.size()) << " ms");
  }
  SERVER_LOG(accepted.size() << " detections kept");
}
