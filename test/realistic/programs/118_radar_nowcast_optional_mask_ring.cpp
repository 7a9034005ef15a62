// Precipitation nowcasting: a small convolutional encoder-decoder maps the
// last four radar reflectivity frames to the next one. Some radar sites ship
// a clutter mask with their frames, held as a std::optional in the sample;
// host frames are staged through a std::array ring of reusable buffers, and
// the training loop is a do-while over a batch cursor. The validation pass
// reports the masked mean absolute error in mm/h.
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <iostream>
#include <optional>
#include <vector>

constexpr int64_t kHist = 4, kH = 64, kW = 64, kBatch = 8;

struct NowcasterImpl : torch::nn::Module {
  NowcasterImpl()
      : enc1(register_module("enc1", torch::nn::Conv2d(torch::nn::Conv2dOptions(kHist, 32, 3).padding(1)))),
        enc2(register_module("enc2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1).stride(2)))),
        dec(register_module("dec", torch::nn::ConvTranspose2d(torch::nn::ConvTranspose2dOptions(64, 32, 2).stride(2)))),
        head(register_module("head", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 1, 1)))) {}

  torch::Tensor forward(const torch::Tensor &frames) {
    auto skip = torch::relu(enc1(frames));
    auto up = torch::relu(dec(torch::relu(enc2(skip))));
    return torch::softplus(head(up + skip));
  }

  torch::nn::Conv2d enc1, enc2;
  torch::nn::ConvTranspose2d dec;
  torch::nn::Conv2d head;
};
TORCH_MODULE(Nowcaster);

struct RadarSample {
  torch::Tensor history;                 // [B, kHist, H, W], mm/h
  torch::Tensor next;                    // [B, 1, H, W]
  std::optional<torch::Tensor> clutter;  // [B, 1, H, W], 1 where the echo is trusted
};

enum class Scaling { Linear, Log, ChannelsLast };

// Synthetic rain cells drifting one pixel per frame towards the south-east.
RadarSample synth_sample(int64_t b, bool site_has_mask) {
  auto cells = torch::rand({b, 1, kH, kW}).pow(6) * 40;
  std::vector<torch::Tensor> frames;
  for (int64_t t = 0; t <= kHist; ++t)
    frames.push_back(torch::roll(cells, {t, t}, {2, 3}));
  auto seq = torch::cat(frames, 1);
  RadarSample s{seq.narrow(1, 0, kHist), seq.narrow(1, kHist, 1), std::nullopt};
  if (site_has_mask)
    s.clutter = (torch::rand({b, 1, kH, kW}) > 0.05).to(torch::kFloat);
  return s;
}

torch::Tensor rescale(torch::Tensor frames, Scaling mode) {
  switch (mode) {
  case Scaling::Log:
    frames = torch::log1p(frames);
    break;
  case Scaling::ChannelsLast:
    // BUG(torch-tensor-to-discarded): contiguous() returns the re-laid-out
    // tensor; `frames` keeps its old memory format.
    frames.contiguous(torch::MemoryFormat::ChannelsLast);
    break;
  case Scaling::Linear:
    break;
  }
  return frames;
}

int main(int argc, char **argv) {
  torch::manual_seed(3);
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  const Scaling scaling = argc > 1 ? Scaling::ChannelsLast : Scaling::Log;

  Nowcaster net;
  net->to(device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(3e-4));

  // Page-locked staging ring for the training uploads.
  std::array<torch::Tensor, 3> ring;
  for (auto &slot : ring)
    slot = torch::empty({kBatch, kHist, kH, kW}, torch::TensorOptions().pinned_memory(true));

  const int64_t steps = 600;
  for (int epoch = 0; epoch < 4; ++epoch) {
    int64_t cursor = 0;
    double running_mae = 0.0;
    do {
      auto sample = synth_sample(kBatch, cursor % 2 == 0);
      auto &slot = ring[cursor % ring.size()];
      slot.copy_(rescale(sample.history, scaling));
      // OK(torch-non-blocking-pageable): every ring slot was allocated pinned.
      auto x = slot.to(device, /*non_blocking=*/true);
      auto target = sample.next.to(device);

      auto pred = net->forward(x);
      auto err = (pred - target).pow(2);
      torch::Tensor loss;
      if (sample.clutter.has_value()) {
        // BUG(torch-device-mismatch): the clutter mask came from the host
        // sample and was never moved; the squared error is on `device`.
        loss = (err * sample.clutter.value()).mean();
      } else {
        loss = err.mean();
      }
      opt.zero_grad();
      loss.backward();
      opt.step();

      // BUG(torch-host-sync-in-loop): the MAE is read back to the host on
      // every step of the do-while training loop.
      running_mae += torch::l1_loss(pred.detach(), target).item<double>();
      switch (cursor % 100) {
      case 0:
        // OK(torch-host-sync-in-loop): only on every hundredth step.
        std::cout << "epoch " << epoch << " step " << cursor << " mse " << loss.item<float>() << "\n";
        break;
      default:
        break;
      }
      ++cursor;
    } while (cursor < steps);
    std::cout << "epoch " << epoch << " mean mae " << running_mae / steps << "\n";
  }

  // Validation: a second, smaller ring allocated in ordinary host memory.
  torch::NoGradGuard no_grad;
  std::array<torch::Tensor, 2> val_ring{torch::zeros({kBatch, kHist, kH, kW}), torch::zeros({kBatch, kHist, kH, kW})};
  auto abs_err = torch::zeros({}, torch::TensorOptions().device(device));
  auto weight = torch::zeros({}, torch::TensorOptions().device(device));
  for (int v = 0; v < 16; ++v) {
    auto sample = synth_sample(kBatch, true);
    auto &slot = val_ring[v % 2];
    slot.copy_(rescale(sample.history, Scaling::Log));
    // BUG(torch-non-blocking-pageable): the validation ring is pageable
    // memory; the copy runs synchronously despite the flag.
    auto x = slot.to(device, /*non_blocking=*/true);
    auto pred = net->forward(x);
    // OK(torch-device-mismatch): the mask is moved along with the target.
    auto trusted = sample.clutter->to(device);
    abs_err += ((pred - sample.next.to(device)).abs() * trusted).sum();
    weight += trusted.sum();
  }
  std::cout << "validation masked mae " << (abs_err / weight.clamp_min(1.0)).item<double>() << " mm/h\n";
  torch::save(net, "nowcaster.pt");
  return 0;
}
