// Flags porosity, cracks and lack of fusion in radiographs of pipeline weld
// seams (96x96 crops along the seam, four classes). The inspection van's GPU
// runs everything under CUDA autocast: an AmpScope takes the dtype as a
// parameter and is held in a std::optional when mixed precision is a
// run-time option. The network rejects crops of the wrong rank by throwing
// from its forward, which the batch scorer and the folder scorer handle
// differently. A second stage distils the classifier into a smaller one
// for the handheld unit.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdint>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kClasses = 4, kSide = 96;

// CUDA autocast in `dtype` for its scope; restores the previous dtype and state.
class AmpScope {
 public:
  explicit AmpScope(at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2
    was_on_ = at::autocast::is_autocast_enabled(at::kCUDA);
    old_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
#else
    was_on_ = at::autocast::is_enabled();
    old_ = at::autocast::get_autocast_gpu_dtype();
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(true);
#endif
  }
  ~AmpScope() {
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(at::kCUDA, was_on_);
    at::autocast::set_autocast_dtype(at::kCUDA, old_);
#else
    at::autocast::set_enabled(was_on_);
    at::autocast::set_autocast_gpu_dtype(old_);
#endif
  }
  AmpScope(const AmpScope&) = delete;
  AmpScope& operator=(const AmpScope&) = delete;

 private:
  bool was_on_ = false;
  at::ScalarType old_ = at::kHalf;
};

struct WeldNetImpl : nn::Module {
  explicit WeldNetImpl(int64_t width)
      : features(register_module(
            "features", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, width, 3).padding(1)), nn::BatchNorm2d(width),
                                       nn::ReLU(), nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(width, 2 * width, 3).padding(1)),
                                       nn::BatchNorm2d(2 * width), nn::ReLU(), nn::AdaptiveAvgPool2d(1)))),
        drop(register_module("drop", nn::Dropout(0.2))),
        fc(register_module("fc", nn::Linear(2 * width, kClasses))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    if (x.dim() != 4 || x.size(1) != 1)
      throw std::invalid_argument("WeldNet expects [N,1,H,W] crops");
    return fc(drop(features->forward(x).flatten(1)));
  }

  nn::Sequential features;
  nn::Dropout drop;
  nn::Linear fc;
};
TORCH_MODULE(WeldNet);

struct Crops {
  torch::Tensor images, labels;
};

std::vector<Crops> seam_crops(int64_t batches, int64_t n, torch::Device device) {
  std::vector<Crops> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto labels = torch::randint(kClasses, {n}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto images = torch::rand({n, 1, kSide, kSide}, device) + 0.05 * labels.to(torch::kFloat).view({n, 1, 1, 1});
    out.push_back({images, labels});
  }
  return out;
}

void train_inspector(WeldNet& model, const std::vector<Crops>& data, bool use_amp, int epochs) {
  model->train();
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9).nesterov(true));
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (const auto& c : data) {
      opt.zero_grad();
      torch::Tensor loss;
      {
        std::optional<AmpScope> amp;
        if (use_amp)
          amp.emplace(at::kHalf);
        loss = F::cross_entropy(model->forward(c.images), c.labels);
      }
      // BUG(torch-autocast-region): with use_amp the loss comes from a float16
      // region (kHalf) and reaches backward() with no loss scale.
      loss.backward();
      opt.step();
    }
  }
}

// Distils the inspector into the handheld model on bfloat16.
void distil_handheld(WeldNet& teacher, WeldNet& student, const std::vector<Crops>& data, double temperature) {
  student->train();
  torch::optim::Adam opt(student->parameters(), torch::optim::AdamOptions(1e-3));
  for (const auto& c : data) {
    AmpScope amp(at::kBFloat16);
    if (c.images.size(0) < 2)
      continue;  // BatchNorm cannot train on a single crop
    torch::Tensor soft;
    {
      torch::NoGradGuard no_grad;
      // OK(torch-eval-mode-missing): main() calls teacher->eval() first.
      soft = torch::softmax(teacher->forward(c.images) / temperature, 1);
    }
    auto log_p = torch::log_softmax(student->forward(c.images) / temperature, 1);
    auto loss = F::kl_div(log_p, soft, F::KLDivFuncOptions().reduction(torch::kBatchMean)) * (temperature * temperature);
    opt.zero_grad();
    // BUG(torch-autocast-region): `amp` is held for the whole iteration, so
    // backward() runs inside the bfloat16 region.
    loss.backward();
    opt.step();
  }
}

// Scores one upload from the van; a malformed upload throws to the caller.
torch::Tensor score_batch(WeldNet& model, const torch::Tensor& crops) {
  torch::NoGradGuard no_grad;
  // BUG(torch-autocast-region): forward() throws on a malformed upload and
  // nothing here switches autocast off on that path.
  at::autocast::set_enabled(true);
  auto probs = torch::softmax(model->forward(crops).to(torch::kFloat), 1);
  at::autocast::set_enabled(false);
  return probs;
}

// Scores every seam of a survey folder; a bad seam is logged and skipped.
std::vector<int64_t> score_folder(WeldNet& model, const std::vector<torch::Tensor>& seams) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> defects;
  for (const auto& seam : seams) {
    if (seam.numel() == 0)
      continue;
    // OK(torch-autocast-region): switched off before the rethrow and at the
    // end of every iteration.
    at::autocast::set_enabled(true);
    torch::Tensor logits;
    try {
      logits = model->forward(seam);
    } catch (const std::invalid_argument&) {
      at::autocast::set_enabled(false);
      throw;
    }
    at::autocast::set_enabled(false);
    defects.push_back((logits.argmax(1) != 0).sum().item<int64_t>());
  }
  return defects;
}

int main(int argc, char** argv) {
  torch::manual_seed(186);
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  const bool use_amp = device.is_cuda() && !(argc > 1 && std::string(argv[1]) == "--fp32");
  auto train = seam_crops(150, 32, device);

  WeldNet inspector(32);
  inspector->to(device);
  train_inspector(inspector, train, use_amp, 6);

  inspector->eval();
  WeldNet handheld(8);
  handheld->to(device);
  distil_handheld(inspector, handheld, train, 4.0);
  handheld->eval();

  std::vector<torch::Tensor> seams;
  for (int i = 0; i < 12; ++i)
    seams.push_back(torch::rand({16, 1, kSide, kSide}, device));
  try {
    auto probs = score_batch(handheld, seams.front());
    std::cout << "porosity " << probs.select(1, 1).mean().item<double>() << '\n';
    auto defects = score_folder(inspector, seams);
    std::cout << "seams with defects " << defects.size() << '\n';
  } catch (const std::invalid_argument& e) {
    std::cerr << "bad upload: " << e.what() << '\n';
  }
}
