// Fish counting for a salmon-farm survey camera: a CSRNet-style density
// network predicts one density map per species; a species' count is the sum
// of its map. Training mixes two kinds of batches in a std::variant: survey
// clips annotated with fish positions (density targets) and logbook clips that
// only carry per-species counts. A visitor runs the step for each kind. Full
// 4K frames are counted tile by tile at inference. The GPU ordinal comes from
// the --gpu flag, kept as a string in CountConfig.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <variant>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kSpecies = 4, kSide = 128, kStride = 4, kTile = 128;

struct CountConfig {
  std::string gpu = "0";
  bool use_gpu = true;
  int64_t steps = 4000, batch = 12, log_every = 200;
};

CountConfig parse_args(int argc, char **argv) {
  CountConfig cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--cpu") cfg.use_gpu = false;
    else if (arg == "--gpu" && i + 1 < argc) cfg.gpu = argv[++i];
    else if (arg == "--steps" && i + 1 < argc) cfg.steps = std::stoll(argv[++i]);
  }
  return cfg;
}

torch::Device resolve_device(const CountConfig &cfg) {
  if (!cfg.use_gpu || !torch::cuda::is_available())
    return torch::Device(torch::kCPU);
  // OK(torch-device-index-unchecked): the ordinal is parsed at run time from
  // --gpu, not written in the code.
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::stoi(cfg.gpu)));
}

struct FishCounterImpl : torch::nn::Module {
  FishCounterImpl() {
    const int64_t widths[] = {3, 32, 64, 64};
    for (int i = 0; i < 3; ++i) {
      front->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(widths[i], widths[i + 1], 3).padding(1)));
      front->push_back(torch::nn::ReLU());
      if (i < 2) front->push_back(torch::nn::MaxPool2d(2));
    }
    for (int64_t dilation : {2, 2, 2}) {
      back->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 64, 3).padding(dilation).dilation(dilation)));
      back->push_back(torch::nn::ReLU());
    }
    back->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(64, kSpecies, 1)));
    register_module("front", front);
    register_module("back", back);
  }
  // [N,3,S,S] -> non-negative densities [N,kSpecies,S/4,S/4]
  torch::Tensor forward(const torch::Tensor &x) { return F::softplus(back->forward(front->forward(x))); }

  torch::nn::Sequential front, back;
};
TORCH_MODULE(FishCounter);

struct SurveyBatch {
  torch::Tensor frames, density;  // [N,3,S,S], [N,K,S/4,S/4]
};
struct LogbookBatch {
  torch::Tensor frames, counts;  // [N,3,S,S], [N,K]
};
using Batch = std::variant<SurveyBatch, LogbookBatch>;

// Fish as blurred blobs, each species with its own tint, on murky water.
SurveyBatch render_survey(int64_t n, int64_t side) {
  const int64_t cells = side / kStride;
  auto points = (torch::rand({n, kSpecies, cells, cells}) < 0.004).to(torch::kFloat);
  auto g = torch::arange(-2, 3, torch::kFloat);
  auto kernel = torch::exp(-(g.view({5, 1}).pow(2) + g.view({1, 5}).pow(2)) / 2.0);
  kernel = (kernel / kernel.sum()).view({1, 1, 5, 5}).repeat({kSpecies, 1, 1, 1});
  auto density = F::conv2d(points, kernel, F::Conv2dFuncOptions().padding(2).groups(kSpecies));
  auto tint = torch::tensor({0.9, 0.5, 0.2, 0.3, 0.8, 0.4, 0.6, 0.6, 0.9, 0.8, 0.8, 0.2}).view({kSpecies, 3});
  auto shading = torch::einsum("nkhw,kc->nchw", {density, tint}) * 6.0;
  auto opts = F::InterpolateFuncOptions().size(std::vector<int64_t>{side, side}).mode(torch::kBilinear).align_corners(false);
  auto frames = (0.15 + F::interpolate(shading, opts) + 0.05 * torch::randn({n, 3, side, side})).clamp(0.0, 1.0);
  return {frames, density};
}

Batch next_batch(int64_t step, int64_t n) {
  auto survey = render_survey(n, kSide);
  if (step % 3 != 0)
    return survey;
  return LogbookBatch{survey.frames, survey.density.sum({2, 3})};
}

class StepVisitor {
 public:
  StepVisitor(FishCounter net, torch::Device device) : net_(net), device_(device) {}

  torch::Tensor operator()(SurveyBatch &b) {
    auto pred = net_->forward(b.frames.to(device_));
    // OK(torch-device-mismatch): the target is moved along with the frames.
    return F::mse_loss(pred, b.density.to(device_)) * 100.0;
  }

  torch::Tensor operator()(LogbookBatch &b) {
    auto frames = b.frames.to(device_);
    // BUG(torch-tensor-to-discarded): the moved counts are thrown away; b.counts
    // stays on the CPU.
    b.counts.to(device_);
    auto pred_counts = net_->forward(frames).sum({2, 3});
    // BUG(torch-device-mismatch): pred_counts is on device_, the logbook
    // counts are still the CPU tensor from next_batch().
    return F::smooth_l1_loss(pred_counts, b.counts) * 0.1;
  }

 private:
  FishCounter net_;
  torch::Device device_;
};

struct Tile {
  int64_t y0, x0;
  torch::Tensor pixels;  // [3,kTile,kTile]
};

std::vector<Tile> cut_tiles(const torch::Tensor &frame) {
  std::vector<Tile> tiles;
  for (int64_t y = 0; y + kTile <= frame.size(1); y += kTile)
    for (int64_t x = 0; x + kTile <= frame.size(2); x += kTile)
      tiles.push_back({y, x, frame.narrow(1, y, kTile).narrow(2, x, kTile)});
  return tiles;
}

torch::Tensor count_frame(FishCounter &net, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto frame = render_survey(1, 4 * kTile).frames[0];
  auto totals = torch::zeros({kSpecies}, device);
  for (const Tile &tile : cut_tiles(frame)) {
    auto density = net->forward(tile.pixels.unsqueeze(0));
    totals += density.sum({0, 2, 3});
  }
  return totals;
}

torch::Tensor count_frame_staged(FishCounter &net, torch::Device device) {
  torch::NoGradGuard no_grad;
  auto frame = render_survey(1, 4 * kTile).frames[0].contiguous();
  auto tiles = cut_tiles(frame);
  for (Tile &tile : tiles)
    // BUG(torch-non-blocking-pageable): the tiles share the frame's pageable
    // storage; without pin_memory() the flag does nothing.
    tile.pixels = tile.pixels.to(device, /*non_blocking=*/true);
  auto totals = torch::zeros({kSpecies}, device);
  for (const Tile &tile : tiles) {
    // OK(torch-device-mismatch): every tile was moved to `device` above.
    totals += net->forward(tile.pixels.unsqueeze(0)).sum({0, 2, 3});
  }
  return totals;
}

void train(FishCounter &net, torch::Device device, const CountConfig &cfg) {
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(2e-4).weight_decay(1e-4));
  StepVisitor visitor(net, device);
  std::vector<float> curve;
  auto record = [&curve](const torch::Tensor &loss) {
    // BUG(torch-host-sync-in-loop): record() runs after every step, and item()
    // waits for the step to finish on the GPU.
    curve.push_back(loss.item<float>());
  };
  net->train();
  for (int64_t step = 1; step <= cfg.steps; ++step) {
    Batch batch = next_batch(step, cfg.batch);
    torch::Tensor loss = std::visit(visitor, batch);
    opt.zero_grad();
    loss.backward();
    opt.step();
    record(loss.detach());
    if (step % cfg.log_every == 0) {
      double mean = 0.0;
      for (int64_t i = step - cfg.log_every; i < step; ++i) mean += curve[i];
      std::cout << "step " << step << " loss " << mean / cfg.log_every << "\n";
    }
  }
}

int main(int argc, char **argv) {
  torch::manual_seed(215);
  const CountConfig cfg = parse_args(argc, argv);
  const torch::Device device = resolve_device(cfg);
  FishCounter net;
  net->to(device);
  train(net, device, cfg);
  torch::save(net, "fish_counter.pt");

  FishCounter deployed;
  torch::load(deployed, "fish_counter.pt");
  deployed->to(device);
  deployed->eval();
  // BUG(torch-device-mismatch): count_frame() feeds the module CPU tiles cut
  // from a frame it rendered itself, and `deployed` is on `device`.
  auto direct = count_frame(deployed, device);
  auto staged = count_frame_staged(deployed, device);
  // OK(torch-host-sync-in-loop): read once, after training.
  std::cout << "species counts " << staged.cpu() << " (direct " << direct.sum().item<double>() << ")\n";
  return 0;
}
