// Grad-CAM explanations for a small CNN classifier: for each image, the
// gradient of the top class score with respect to the last feature map
// weights that map into a heat map, which is written to disk.
#include <torch/torch.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

struct CamNetImpl : torch::nn::Module {
  CamNetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(32, 10))) {}
  // Returns the last feature map and the logits.
  std::pair<torch::Tensor, torch::Tensor> forward(torch::Tensor x) {
    auto acts = torch::relu(conv2(torch::max_pool2d(torch::relu(conv1(x)), 2)));
    return {acts, fc(acts.mean({2, 3}))};
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc;
};
TORCH_MODULE(CamNet);

torch::Tensor cam_from(const torch::Tensor &acts, const torch::Tensor &score) {
  auto grads = torch::autograd::grad({score}, {acts})[0];
  auto weights = grads.mean({2, 3}, /*keepdim=*/true);
  auto cam = torch::relu((weights * acts).sum(1)).squeeze(0);
  return (cam / (cam.max() + 1e-6)).detach();
}

void save_heatmap(const torch::Tensor &heat, const std::string &path) {
  auto rows_first = heat.t();
  // BUG(torch-tensor-to-discarded): the contiguous copy is discarded, and
  // the raw write below walks the transposed strides.
  rows_first.contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char *>(rows_first.data_ptr<float>()),
            static_cast<std::streamsize>(rows_first.numel() * sizeof(float)));
}

void explain_all(CamNet &net, const std::vector<torch::Tensor> &images, torch::Device device) {
  net->eval();
  for (size_t i = 0; i < images.size(); ++i) {
    auto x = images[i].to(device).unsqueeze(0);
    // OK(torch-inference-without-no-grad): cam_from() differentiates the
    // score with torch::autograd::grad.
    auto out = net->forward(x);
    auto top_score = out.second.gather(1, out.second.argmax(1, /*keepdim=*/true)).sum();
    auto cam = cam_from(out.first, top_score);
    auto host = cam.to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): save_heatmap() reads the buffer
    // before the copy has been waited for.
    save_heatmap(host, "cam_" + std::to_string(i) + ".bin");
  }
}

void benchmark_on_gpu(CamNet &net) {
  torch::NoGradGuard no_grad;
  // OK(torch-cuda-unguarded): only called under an is_available() check.
  auto x = torch::randn({64, 3, 32, 32}).cuda();
  net->to(x.device());
  for (int i = 0; i < 10; ++i)
    net->forward(x);
  torch::cuda::synchronize();
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  CamNet net;
  net->to(device);
  std::vector<torch::Tensor> images;
  for (int i = 0; i < 8; ++i)
    images.push_back(torch::rand({3, 32, 32}));
  explain_all(net, images, device);

  auto summary = net->forward(torch::stack(images).to(device)).second.softmax(1).mean(0);
  auto host = summary.to(torch::kCPU, /*non_blocking=*/true);
  torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised first.
  std::cout << "mean class distribution " << host << '\n';

  if (torch::cuda::is_available())
    benchmark_on_gpu(net);
  return 0;
}
