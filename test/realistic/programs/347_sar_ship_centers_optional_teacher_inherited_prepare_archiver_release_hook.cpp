// Ship detection in Sentinel-1 SAR scenes (VV/VH): a CenterNet-style student,
// trained with accumulation and distilled from last quarter's model if present,
// scans whole scenes (in strips when memory runs out), archives heatmaps from a
// second GPU if there is one, and decodes tiles into centres. LibTorch 1.13/2.x.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

constexpr int64_t kBands = 2, kTile = 128, kStride = 4, kOut = kTile / kStride;

struct ShipNetImpl : nn::Module {
  ShipNetImpl()
      : backbone(register_module("backbone", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(kBands, 32, 3).stride(2).padding(1)),
                                                           nn::BatchNorm2d(32), nn::ReLU(), nn::Conv2d(nn::Conv2dOptions(32, 64, 3).stride(2).padding(1)),
                                                           nn::BatchNorm2d(64), nn::ReLU(), nn::Dropout2d(0.1)))),
        heat(register_module("heat", nn::Conv2d(nn::Conv2dOptions(64, 1, 1)))),
        offset(register_module("offset", nn::Conv2d(nn::Conv2dOptions(64, 2, 1)))) {}
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor &x) {
    auto f = backbone->forward(x);
    return {heat->forward(f), offset->forward(f)};
  }
  nn::Sequential backbone;
  nn::Conv2d heat, offset;
};
TORCH_MODULE(ShipNet);

// Backscatter [B, 2, 128, 128] in dB; heatmap, offsets and centre mask at
// stride 4; ship counts from the AIS match (host-side metadata).
struct TileBatch {
  torch::Tensor image, heat, offset, mask, num_ships;
};

std::vector<TileBatch> synth_tiles(int64_t batches, int64_t n) {
  std::vector<TileBatch> out;
  for (int64_t i = 0; i < batches; ++i) {
    auto mask = (torch::rand({n, 1, kOut, kOut}) > 0.995).to(torch::kFloat);
    out.push_back({torch::randn({n, kBands, kTile, kTile}) * 3.0 - 15.0, F::max_pool2d(mask, F::MaxPool2dFuncOptions(3).stride(1).padding(1)),
                   torch::rand({n, 2, kOut, kOut}), mask, mask.sum({1, 2, 3}).to(torch::kLong)});
  }
  return out;
}

// Output-grid coordinates in input pixels, [1, 2, h, w].
template <int64_t Stride>
struct PixelGrid {
  static torch::Tensor make(int64_t h, int64_t w) {
    auto ys = torch::arange(h).to(torch::kFloat).view({1, h, 1}).expand({1, h, w});
    auto xs = torch::arange(w).to(torch::kFloat).view({1, 1, w}).expand({1, h, w});
    return torch::cat({ys, xs}).view({1, 2, h, w}) * static_cast<double>(Stride);
  }
};

torch::Tensor pinned_staging(const torch::Tensor &host) {
  auto buf = torch::empty(host.sizes(), host.options().pinned_memory(true));
  buf.copy_(host);
  return buf;
}
std::optional<ShipNet> load_teacher(const std::string &path, torch::Device device) {
  if (!std::ifstream(path).good())
    return std::nullopt;
  std::optional<ShipNet> teacher;  // last quarter's model
  teacher.emplace();
  torch::load(*teacher, path);
  (*teacher)->to(device);
  (*teacher)->eval();
  return teacher;
}
torch::Tensor center_loss(const torch::Tensor &heat, const torch::Tensor &off, const TileBatch &b,
                          torch::Device device) {
  auto mask = b.mask.to(device);
  return F::binary_cross_entropy_with_logits(heat, b.heat.to(device)) +
         F::l1_loss(off * mask, b.offset.to(device) * mask);
}

void train_student(ShipNet &student, std::optional<ShipNet> &teacher, const std::vector<TileBatch> &data,
                   torch::Device device, int64_t accum) {
  student->train();
  torch::optim::Adam opt(student->parameters(), torch::optim::AdamOptions(2e-4));
  opt.zero_grad();
  int64_t micro = 0, ships_seen = 0;
  for (const auto &b : data) {
    auto x = b.image.to(device);
    auto [heat, off] = student->forward(x);
    auto loss = center_loss(heat, off, b, device);
    if (teacher) {
      torch::NoGradGuard no_grad;
      // OK(torch-eval-mode-missing): load_teacher() switched the teacher to
      // eval() before returning it in the optional.
      auto soft = torch::sigmoid((*teacher)->forward(x).first);
      loss = loss + 0.5 * F::binary_cross_entropy_with_logits(heat, soft);
    }
    // OK(torch-grad-accumulation-unscaled): divided by the accumulation count.
    (loss / static_cast<double>(accum)).backward();
    // OK(torch-host-sync-in-loop): the AIS counts live on the host.
    ships_seen += b.num_ships.sum().item<int64_t>();
    if (++micro % accum == 0) {
      // OK(torch-missing-zero-grad): reset under the same condition as the step.
      opt.step();
      opt.zero_grad();
    }
  }
  std::cout << "trained on " << ships_seen << " ships\n";
  if (device.is_cuda())
    // OK(torch-empty-cache-in-loop): once, after the training loop.
    c10::cuda::CUDACachingAllocator::emptyCache();
}

torch::Tensor scan_full_scene(ShipNet &net, const torch::Tensor &scene) {
  torch::NoGradGuard no_grad;
  try {
    return torch::sigmoid(net->forward(scene).first);
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): the allocator emptied its cache before
    // raising; the same whole scene is run again below.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
  return torch::sigmoid(net->forward(scene).first);
}

torch::Tensor run_strips(ShipNet &net, const torch::Tensor &scene, int64_t strip) {
  std::vector<torch::Tensor> parts;
  for (int64_t y = 0; y < scene.size(2); y += strip) {
    // OK(torch-inference-without-no-grad, torch-loss-accumulation-graph): the
    // only caller holds a no-grad guard.
    parts.push_back(torch::sigmoid(net->forward(scene.narrow(2, y, std::min(strip, scene.size(2) - y))).first));
  }
  return torch::cat(parts, 2);
}

torch::Tensor scan_in_strips(ShipNet &net, const torch::Tensor &scene, int64_t strip) {
  torch::NoGradGuard no_grad;
  try {
    return run_strips(net, scene, strip);
  } catch (const c10::OutOfMemoryError &) {
    // OK(torch-empty-cache-oom-retry): the retry uses strips half as high.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
  return run_strips(net, scene, strip / 2);
}

// A deployed copy of the net, on its device and in eval mode.
class DeployedModel {
 public:
  DeployedModel(ShipNet net, torch::Device device) : net_(std::move(net)), device_(device) { prepare(); }

 protected:
  void prepare() {
    net_->to(device_);
    net_->eval();
  }
  ShipNet net_;
  torch::Device device_;
};

class TileScanner : public DeployedModel {
 public:
  using DeployedModel::DeployedModel;

  torch::Tensor heatmap(const torch::Tensor &scene_host) {
    torch::NoGradGuard no_grad;
    torch::Tensor x = scene_host;
    if (device_.is_cuda())
      // OK(torch-non-blocking-pageable): pinned_staging() returns pinned memory.
      x = pinned_staging(scene_host).to(device_, /*non_blocking=*/true);
    // OK(torch-eval-mode-missing): prepare(), run by the inherited
    // constructor, switched the net to eval().
    return torch::sigmoid(net_->forward(x).first);
  }

  std::vector<std::pair<float, float>> detect(const torch::Tensor &tile, double threshold) {
    torch::NoGradGuard no_grad;
    auto out = net_->forward(tile.to(device_).unsqueeze(0));
    auto grid = PixelGrid<kStride>::make(kOut, kOut);
    // BUG(torch-device-mismatch): the grid is built on the host by
    // PixelGrid::make; the offsets are on `device_`.
    auto centers = (out.second * static_cast<double>(kStride) + grid)[0];
    auto peaks = (torch::sigmoid(out.first)[0][0] > threshold).nonzero().cpu();
    auto c = centers.cpu();
    auto pk = peaks.accessor<int64_t, 2>();
    auto ca = c.accessor<float, 3>();
    std::vector<std::pair<float, float>> ships;
    for (int64_t i = 0; i < pk.size(0); ++i)
      ships.emplace_back(ca[0][pk[i][0]][pk[i][1]], ca[1][pk[i][0]][pk[i][1]]);
    return ships;
  }
};

class SceneArchiver {
 public:
  // Frees cached blocks between scenes so the co-located SAR calibrator has room.
  SceneArchiver()
      : release_([] {
          // BUG(torch-empty-cache-in-loop): run after every scene by
          // archive_all(); each call is a device-wide cudaFree.
          c10::cuda::CUDACachingAllocator::emptyCache();
        }) {}

  void archive_all(TileScanner &scanner, const std::vector<torch::Tensor> &scenes, bool on_gpu) {
    for (size_t i = 0; i < scenes.size(); ++i) {
      auto host = scanner.heatmap(scenes[i]).to(torch::kCPU, /*non_blocking=*/true);
      if (on_gpu)
        c10::cuda::getCurrentCUDAStream().synchronize();
      // OK(torch-non-blocking-d2h-race): the stream was synchronised above
      // whenever the copy was asynchronous.
      std::cout << "scene " << i << " max ship score " << host.max().item<float>() << '\n';
      torch::save(host, "/tmp/heat_" + std::to_string(i) + ".pt");
      if (on_gpu)
        release_();
    }
  }

 private:
  std::function<void()> release_;
};

int main() {
  torch::manual_seed(347);
  // OK(torch-cuda-unguarded): the ternary falls back to the CPU.
  torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  torch::Device archive_device = device;
  if (torch::cuda::device_count() > 1)
    // OK(torch-device-index-unchecked): a second GPU is checked for above.
    archive_device = torch::Device(torch::kCUDA, 1);

  auto teacher = load_teacher("/models/ship_centers_2024q4.pt", device);
  ShipNet student;
  student->to(device);
  train_student(student, teacher, synth_tiles(32, 16), device, 4);

  student->eval();
  auto scene = (torch::randn({1, kBands, 1024, 1024}) * 3.0 - 15.0).to(device);
  auto heat_full = scan_full_scene(student, scene);
  auto heat_strips = scan_in_strips(student, scene, 256);
  std::cout << "full vs strips " << (heat_full - heat_strips).abs().max().item<float>() << '\n';

  ShipNet archive_net;
  {
    std::stringstream weights;
    torch::save(student, weights);
    torch::load(archive_net, weights);
  }
  TileScanner scanner(archive_net, archive_device);
  std::vector<torch::Tensor> scenes(3, torch::randn({1, kBands, 512, 512}) * 3.0 - 15.0);
  SceneArchiver archiver;
  archiver.archive_all(scanner, scenes, archive_device.is_cuda());

  for (const auto &[y, x] : scanner.detect(synth_tiles(1, 1).front().image[0], 0.3))
    std::cout << "ship at (" << y << ", " << x << ")\n";
}
