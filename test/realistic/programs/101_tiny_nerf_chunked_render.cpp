// A tiny NeRF: an MLP over positionally encoded 3-D points, volume-rendered
// along camera rays. Training samples random rays from one synthetic view;
// afterwards a turntable of frames is rendered in chunks through nested
// lambdas to bound the memory of a full image.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

constexpr int64_t kFreqs = 6, kSamples = 32, kImg = 64;

struct Camera {
  torch::Tensor K_inv;  // [3, 3]
  static Camera from_fov(double fov_deg, int64_t size) {
    const double f = 0.5 * size / std::tan(0.5 * fov_deg * M_PI / 180.0);
    auto K = torch::tensor({f, 0.0, size / 2.0, 0.0, f, size / 2.0, 0.0, 0.0, 1.0}, torch::kFloat).view({3, 3});
    return {torch::inverse(K)};
  }
};

torch::Tensor encode(const torch::Tensor &p) {  // [..., 3] -> [..., 3 + 6 * kFreqs]
  std::vector<torch::Tensor> parts{p};
  for (int64_t k = 0; k < kFreqs; ++k) {
    parts.push_back(torch::sin(p * std::pow(2.0, k)));
    parts.push_back(torch::cos(p * std::pow(2.0, k)));
  }
  return torch::cat(parts, -1);
}

struct FieldImpl : torch::nn::Module {
  FieldImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(3 + 6 * kFreqs, 128), torch::nn::ReLU(),
                                                         torch::nn::Linear(128, 128), torch::nn::ReLU(),
                                                         torch::nn::Linear(128, 4)))) {}
  torch::Tensor forward(const torch::Tensor &pts) { return net->forward(encode(pts)); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Field);

// Casts the rays of every pixel for a camera rotated about the y axis.
class RayCaster {
 public:
  RayCaster(Camera cam, torch::Device device) : cam_(std::move(cam)), device_(device) {}

  std::pair<torch::Tensor, torch::Tensor> rays(double angle) const {
    auto ij = torch::stack(torch::meshgrid({torch::arange(kImg, torch::TensorOptions().device(device_)),
                                            torch::arange(kImg, torch::TensorOptions().device(device_))},
                                           "xy"),
                           -1)
                  .to(torch::kFloat)
                  .view({-1, 2});
    auto pix = torch::cat({ij, torch::ones({ij.size(0), 1}, ij.options())}, 1);
    // BUG(torch-device-mismatch): the inverse intrinsics come from a static
    // factory that builds them on the host; the pixel grid is on device_.
    auto dirs = torch::matmul(pix, cam_.K_inv.t());
    const double c = std::cos(angle), s = std::sin(angle);
    auto R = torch::tensor({c, 0.0, s, 0.0, 1.0, 0.0, -s, 0.0, c}, torch::kFloat).view({3, 3}).to(device_);
    dirs = torch::nn::functional::normalize(torch::matmul(dirs, R.t()),
                                            torch::nn::functional::NormalizeFuncOptions().dim(1));
    auto origin = torch::matmul(torch::tensor({0.0f, 0.0f, -4.0f}).to(device_), R.t()).expand_as(dirs);
    return {origin, dirs};
  }

 private:
  Camera cam_;
  torch::Device device_;
};

torch::Tensor composite(const torch::Tensor &raw, const torch::Tensor &t_vals) {  // raw [R, S, 4]
  auto rgb = torch::sigmoid(raw.narrow(-1, 0, 3));
  auto sigma = torch::relu(raw.select(-1, 3));
  auto delta = (t_vals.narrow(0, 1, kSamples - 1) - t_vals.narrow(0, 0, kSamples - 1));
  delta = torch::cat({delta, torch::full({1}, 1e10, delta.options())});
  auto alpha = 1 - torch::exp(-sigma * delta);
  auto trans = torch::cumprod(torch::cat({torch::ones_like(alpha.narrow(1, 0, 1)), 1 - alpha + 1e-10}, 1), 1)
                   .narrow(1, 0, kSamples);
  return ((alpha * trans).unsqueeze(-1) * rgb).sum(1);
}

int main() {
  const torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  const RayCaster caster(Camera::from_fov(40.0, kImg), device);
  Field field;
  field->to(device);
  torch::optim::Adam opt(field->parameters(), torch::optim::AdamOptions(5e-4));
  auto t_vals = torch::linspace(2.0, 6.0, kSamples, torch::TensorOptions().device(device));

  auto [o_all, d_all] = caster.rays(0.0);
  auto target_all = torch::rand({kImg * kImg, 3}, torch::TensorOptions().device(device));
  for (int64_t step = 0; step < 5000; ++step) {
    auto idx = torch::randint(0, kImg * kImg, {1024}, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto o = o_all.index_select(0, idx), d = d_all.index_select(0, idx);
    auto pts = o.unsqueeze(1) + d.unsqueeze(1) * t_vals.view({1, -1, 1});
    auto rgb = composite(field->forward(pts), t_vals);
    auto loss = torch::mse_loss(rgb, target_all.index_select(0, idx));
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 250 == 0) {
      torch::NoGradGuard no_grad;
      // OK(torch-host-sync-in-loop): a logging step.
      auto psnr = -10.0 * torch::log10(loss.detach());
      std::cout << "step " << step << " psnr " << psnr.item<float>() << "\n";
    }
  }

  auto render_image = [&](const torch::Tensor &origins, const torch::Tensor &dirs) {
    std::vector<torch::Tensor> chunks;
    auto render_chunk = [&](int64_t start, int64_t len) {
      auto pts = origins.narrow(0, start, len).unsqueeze(1) + dirs.narrow(0, start, len).unsqueeze(1) * t_vals.view({1, -1, 1});
      // BUG(torch-inference-without-no-grad): neither the chunk loop nor the
      // turntable loop calls backward, and no guard is held.
      return composite(field->forward(pts), t_vals);
    };
    for (int64_t s = 0; s < origins.size(0); s += 1024)
      // OK(torch-loss-accumulation-graph): the chunks of one image, joined
      // and returned.
      chunks.push_back(render_chunk(s, std::min<int64_t>(1024, origins.size(0) - s)));
    return torch::cat(chunks).view({kImg, kImg, 3});
  };
  auto release = [&] {
    if (device.is_cuda())
      // BUG(torch-empty-cache-in-loop): called after every turntable frame.
      c10::cuda::CUDACachingAllocator::emptyCache();
  };

  for (int f = 0; f < 36; ++f) {
    auto [o, d] = caster.rays(f * M_PI / 18.0);
    auto img = (render_image(o, d) * 255).cpu();
    // BUG(torch-tensor-to-discarded): the byte copy is dropped; the saved
    // frame is still float.
    img.to(torch::kByte);
    torch::save(img, "frame_" + std::to_string(f) + ".pt");
    release();
  }
  return 0;
}
