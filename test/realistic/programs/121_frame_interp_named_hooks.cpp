// Video frame interpolation: from frames t-1 and t+1 a small convnet
// predicts a per-pixel blend weight and a residual for the middle frame.
// Clips come from loader lambdas; after-step hooks (logging, loss tracking,
// memory release) are std::function callbacks registered by name in a
// std::map and run in name order after every step. A preview of the middle
// frames is copied back for a contact sheet at the end.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <string>

constexpr int64_t kH = 96, kW = 96, kClipBatch = 8;

struct InterpNetImpl : torch::nn::Module {
  InterpNetImpl()
      : c1(register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(6, 48, 3).padding(1)))),
        c2(register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(48, 48, 3).padding(1)))),
        c3(register_module("c3", torch::nn::Conv2d(torch::nn::Conv2dOptions(48, 4, 3).padding(1)))) {}

  torch::Tensor forward(const torch::Tensor &prev, const torch::Tensor &next) {
    auto h = torch::relu(c2(torch::relu(c1(torch::cat({prev, next}, 1)))));
    auto out = c3(h);
    auto w = torch::sigmoid(out.narrow(1, 0, 1));
    return w * prev + (1 - w) * next + 0.1 * torch::tanh(out.narrow(1, 1, 3));
  }

  torch::nn::Conv2d c1, c2, c3;
};
TORCH_MODULE(InterpNet);

struct StepInfo {
  int64_t step;
  torch::Tensor loss;  // detached
};

// Writes the first channel of each frame as rows of a PGM contact sheet.
void write_contact_sheet(const torch::Tensor &frames, const std::string &path) {
  auto img = (frames.select(1, 0).clamp(0, 1) * 255).to(torch::kByte).contiguous();
  std::ofstream out(path, std::ios::binary);
  out << "P5\n" << kW << " " << img.size(0) * kH << "\n255\n";
  out.write(reinterpret_cast<const char *>(img.data_ptr<uint8_t>()), img.numel());
}

int main() {
  torch::manual_seed(23);
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  InterpNet net;
  net->to(device);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(2e-4));

  // [B, T = 3, C, H, W]: a bright square moving across a noisy background.
  auto load_clip = [](int64_t b) {
    auto clip = torch::rand({b, 3, 3, kH, kW}) * 0.2;
    for (int64_t t = 0; t < 3; ++t)
      clip.select(1, t).narrow(2, 30 + 8 * t, 16).narrow(3, 30 + 8 * t, 16).fill_(1.0);
    // BUG(torch-tensor-to-discarded): pin_memory() returns a pinned copy;
    // `clip` itself stays in pageable memory.
    clip.pin_memory();
    return clip;
  };
  auto load_pinned_clip = [&](int64_t b) { return load_clip(b).pin_memory(); };

  double tracked_loss = 0.0;
  auto epoch_loss = torch::zeros({}, torch::TensorOptions().device(device));
  std::map<std::string, std::function<void(const StepInfo &)>> hooks;
  hooks.emplace("log", [&](const StepInfo &info) {
    if (info.step % 250 == 0)
      // OK(torch-host-sync-in-loop): only on logging steps.
      std::cout << "step " << info.step << " l1 " << info.loss.item<float>() << "\n";
  });
  hooks.emplace("track", [&](const StepInfo &info) {
    // OK(torch-loss-accumulation-graph): the hook receives a detached loss.
    epoch_loss += info.loss;
  });
  hooks.emplace("zz_release", [](const StepInfo &) {
    // BUG(torch-empty-cache-in-loop): the training loop runs every
    // registered hook after every step.
    c10::cuda::CUDACachingAllocator::emptyCache();
  });

  for (int64_t step = 0; step < 2000; ++step) {
    // BUG(torch-non-blocking-pageable): load_clip() hands back a pageable
    // tensor (its pin_memory() result was dropped).
    auto clip = load_clip(kClipBatch).to(device, /*non_blocking=*/true);
    auto pred = net->forward(clip.select(1, 0), clip.select(1, 2));
    auto loss = torch::l1_loss(pred, clip.select(1, 1));
    opt.zero_grad();
    loss.backward();
    opt.step();
    const StepInfo info{step, loss.detach()};
    for (auto &[name, hook] : hooks)
      hook(info);
  }
  tracked_loss = (epoch_loss / 2000).item<double>();
  std::cout << "mean l1 " << tracked_loss << "\n";

  // Validation on clips from the pinned loader.
  torch::NoGradGuard no_grad;
  auto val_clip = load_pinned_clip(kClipBatch);
  // OK(torch-non-blocking-pageable): the pinned loader returns page-locked memory.
  auto frames = val_clip.to(device, /*non_blocking=*/true);
  auto score_span = [&](int64_t a, int64_t b) {
    auto middle = [&] {
      auto pred = net->forward(frames.select(1, a), frames.select(1, b));
      // BUG(torch-device-mismatch): the target frame is read from the host
      // clip; the prediction is on `device`.
      return torch::mse_loss(pred, val_clip.select(1, (a + b) / 2));
    };
    return middle();
  };
  std::cout << "val mse " << score_span(0, 2) << "\n";

  auto preview = net->forward(frames.select(1, 0), frames.select(1, 2));
  auto host_preview = preview.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): nothing waited for the copy before the
  // contact sheet reads the frames.
  write_contact_sheet(host_preview, "preview.pgm");

  auto target = frames.select(1, 1);
  auto host_pred = preview.to(torch::kCPU, /*non_blocking=*/true);
  // A blocking read of a tensor on `device` waits for the stream, and with it
  // for the copy queued before it.
  const double psnr = -10.0 * std::log10((preview - target).pow(2).mean().item<double>());
  // OK(torch-non-blocking-d2h-race): the item() above drained the stream.
  write_contact_sheet(host_pred, "preview_after_sync.pgm");
  std::cout << "preview psnr " << psnr << "\n";
  return 0;
}
