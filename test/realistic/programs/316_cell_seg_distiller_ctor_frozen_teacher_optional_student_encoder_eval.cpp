// Nuclei segmentation in fluorescence microscopy (single-channel 64x64 DAPI
// tiles, binary masks). A wide segmentation net trained on the annotated
// archive is distilled into a narrow one that runs on the microscope PC. The
// Distiller owns the frozen teacher (it switches it to eval() once, in its
// constructor) and builds the student lazily, on first use, in a
// std::optional member. Round two refines the teacher on freshly annotated
// hard tiles and distils once more; the student then segments the test
// plate with flip test-time augmentation.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace cells {

constexpr int64_t kTile = 64;

struct Tile {
  torch::Tensor image;  // [B, 1, 64, 64], intensity in [0, 1]
  torch::Tensor mask;   // [B, 1, 64, 64], 1 inside a nucleus
};

// Blobs of Gaussian intensity; the mask thresholds the clean signal.
std::vector<Tile> synth_tiles(int64_t batches, int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<Tile> out;
  for (int64_t b = 0; b < batches; ++b) {
    auto centres = torch::rand({n, 1, kTile / 8, kTile / 8}).gt(0.85).to(torch::kFloat);
    auto clean = F::interpolate(centres, F::InterpolateFuncOptions()
                                             .size(std::vector<int64_t>{kTile, kTile})
                                             .mode(torch::kBilinear)
                                             .align_corners(false));
    auto image = (clean + 0.1 * torch::randn_like(clean)).clamp(0.0, 1.0);
    out.push_back({image, clean.gt(0.3).to(torch::kFloat)});
  }
  return out;
}

torch::Device pick_device() {
  // OK(torch-cuda-unguarded): CUDA only when the runtime says it is there.
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

nn::Sequential conv_block(int64_t in, int64_t out) {
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1)), nn::BatchNorm2d(out), nn::ReLU());
}

struct EncoderImpl : nn::Module {
  explicit EncoderImpl(int64_t width)
      : stem(register_module("stem", conv_block(1, width))), down(register_module("down", conv_block(width, 2 * width))) {}
  torch::Tensor forward(const torch::Tensor &x) {
    return down->forward(F::max_pool2d(stem->forward(x), F::MaxPool2dFuncOptions(2)));
  }
  nn::Sequential stem, down;
};
TORCH_MODULE(Encoder);

// Encoder at half resolution, a dropout-regularised 1x1 head, bilinear upsampling.
struct SegNetImpl : nn::Module {
  SegNetImpl(int64_t width, double p)
      : encoder(register_module("encoder", Encoder(width))),
        drop(register_module("drop", nn::Dropout(p))),
        head(register_module("head", nn::Conv2d(nn::Conv2dOptions(2 * width, 1, 1)))) {}
  torch::Tensor forward(const torch::Tensor &x) {
    auto logits = head->forward(drop->forward(encoder->forward(x)));
    return F::interpolate(logits, F::InterpolateFuncOptions()
                                      .scale_factor(std::vector<double>{2.0, 2.0})
                                      .mode(torch::kBilinear)
                                      .align_corners(false));
  }
  Encoder encoder;
  nn::Dropout drop;
  nn::Conv2d head;
};
TORCH_MODULE(SegNet);

// Soft Dice on probabilities; 1 is a perfect overlap.
torch::Tensor dice_coef(const torch::Tensor &prob, const torch::Tensor &mask) {
  auto inter = (prob * mask).sum();
  return (2.0 * inter + 1.0) / (prob.sum() + mask.sum() + 1.0);
}

}  // namespace cells

using cells::SegNet;
using cells::Tile;

void fit_segmenter(SegNet &net, torch::optim::Optimizer &opt, const std::vector<Tile> &data,
                   const torch::Device &device, int epochs) {
  for (int e = 0; e < epochs; ++e) {
    for (const auto &t : data) {
      opt.zero_grad();
      // OK(torch-eval-mode-missing): its one caller passes a freshly built net.
      auto loss = F::binary_cross_entropy_with_logits(net->forward(t.image.to(device)), t.mask.to(device));
      loss.backward();
      opt.step();
    }
  }
}

class Distiller {
 public:
  Distiller(SegNet teacher, double temperature, torch::Device device)
      : teacher_(std::move(teacher)), temperature_(temperature), device_(device) {
    teacher_->eval();  // the teacher only ever produces soft targets
  }

  SegNet &student() {
    ensure_student();
    return *student_;
  }

  torch::Tensor fit_epoch(const std::vector<Tile> &data) {
    ensure_student();
    SegNet &student = *student_;
    auto epoch_loss = torch::zeros({}, torch::TensorOptions().device(device_));
    for (const auto &t : data) {
      auto x = t.image.to(device_);
      auto y = t.mask.to(device_);
      torch::Tensor soft;
      {
        torch::NoGradGuard no_grad;
        // OK(torch-eval-mode-missing): the constructor switched the teacher to eval().
        soft = torch::sigmoid(teacher_->forward(x) / temperature_);
      }
      opt_->zero_grad();
      auto logits = student->forward(x);
      auto loss = F::binary_cross_entropy_with_logits(logits, y) +
                  0.5 * F::binary_cross_entropy_with_logits(logits / temperature_, soft);
      loss.backward();
      opt_->step();
      // OK(torch-loss-accumulation-graph): detached before it joins the epoch sum.
      epoch_loss += loss.detach();
    }
    return epoch_loss / static_cast<double>(data.size());
  }

  double dice(const std::vector<Tile> &data) {
    ensure_student();
    torch::NoGradGuard no_grad;
    double total = 0.0;
    for (const auto &t : data) {
      // BUG(torch-eval-mode-missing): ensure_student() built the student in
      // training mode and nothing calls eval(): dropout and batch statistics.
      auto prob = torch::sigmoid((*student_)->forward(t.image.to(device_)));
      // BUG(torch-device-mismatch): the student's probabilities are on
      // `device_`, the tile's mask was never moved off the host.
      total += cells::dice_coef(prob, t.mask).item<double>();
    }
    return total / static_cast<double>(data.size());
  }

 private:
  void ensure_student() {
    if (student_)
      return;
    student_.emplace(8, 0.1);
    (*student_)->to(device_);
    opt_ = std::make_unique<torch::optim::Adam>((*student_)->parameters(), torch::optim::AdamOptions(2e-3));
  }

  SegNet teacher_;
  double temperature_;
  torch::Device device_;
  std::optional<SegNet> student_;
  std::unique_ptr<torch::optim::Adam> opt_;
};

double teacher_baseline(SegNet &teacher, const std::vector<Tile> &data, const torch::Device &device) {
  double total = 0.0;
  for (const auto &t : data) {
    // OK(torch-eval-mode-missing): the Distiller's constructor switched this module to eval().
    // BUG(torch-inference-without-no-grad): a scoring loop with no backward
    // and no guard: autograd keeps every activation of the teacher.
    auto prob = torch::sigmoid(teacher->forward(t.image.to(device)));
    // OK(torch-device-mismatch): the mask follows the image to `device`.
    total += cells::dice_coef(prob, t.mask.to(device)).item<double>();
  }
  return total / static_cast<double>(data.size());
}

// Averages the prediction with that of the horizontally flipped tile.
torch::Tensor predict_tta(SegNet &net, const torch::Tensor &image) {
  net->encoder->eval();  // use the running batch-norm statistics
  torch::NoGradGuard no_grad;
  // BUG(torch-eval-mode-missing): only the encoder was switched; `net` is
  // still training and its head's dropout zeroes features on every tile.
  auto prob = 0.5 * (torch::sigmoid(net->forward(image)) + torch::sigmoid(net->forward(image.flip({3}))).flip({3}));
  return prob.gt(0.5).to(torch::kFloat);
}

int main() {
  const torch::Device device = cells::pick_device();
  const auto archive = cells::synth_tiles(30, 8, 316);
  const auto val = cells::synth_tiles(4, 16, 317);
  const auto hard = cells::synth_tiles(6, 8, 318);
  const auto plate = cells::synth_tiles(3, 4, 319);

  SegNet teacher(32, 0.3);
  teacher->to(device);
  torch::optim::Adam teacher_opt(teacher->parameters(), torch::optim::AdamOptions(1e-3));
  fit_segmenter(teacher, teacher_opt, archive, device, 3);

  Distiller distiller(teacher, 2.0, device);
  std::cout << "teacher dice " << teacher_baseline(teacher, val, device) << '\n';

  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      torch::optim::SGD refine_opt(teacher->parameters(), torch::optim::SGDOptions(1e-3).momentum(0.9));
      for (const auto &t : hard) {
        refine_opt.zero_grad();
        // BUG(torch-eval-mode-missing): the Distiller froze the teacher with
        // eval() and nothing calls train(): it is refined with dropout off
        // and frozen batch-norm statistics.
        auto loss = F::binary_cross_entropy_with_logits(teacher->forward(t.image.to(device)), t.mask.to(device));
        loss.backward();
        refine_opt.step();
      }
    }
    for (int epoch = 0; epoch < 4; ++epoch) {
      auto loss = distiller.fit_epoch(archive);
      // OK(torch-host-sync-in-loop): one read per epoch, outside the batch loop.
      std::cout << "round " << round << " epoch " << epoch << " loss " << loss.item<double>() << " dice "
                << distiller.dice(val) << '\n';
    }
  }

  SegNet &student = distiller.student();
  int64_t nuclei_px = 0;
  for (const auto &t : plate) {
    auto mask = predict_tta(student, t.image.to(device));
    nuclei_px += mask.sum().item<int64_t>();
  }
  std::cout << "segmented nucleus pixels on the plate: " << nuclei_px << '\n';
}
