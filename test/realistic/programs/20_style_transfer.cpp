// Neural style transfer: a frozen convolutional feature extractor, Gram
// matrices of its activations, and an optimisation over the image pixels.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

struct FeatureNetImpl : torch::nn::Module {
  FeatureNetImpl()
      : c1(register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 32, 3).padding(1)))),
        c2(register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1)))),
        c3(register_module("c3", torch::nn::Conv2d(torch::nn::Conv2dOptions(64, 64, 3).padding(1)))) {
    for (auto &p : parameters())
      p.requires_grad_(false);
  }
  std::vector<torch::Tensor> forward(torch::Tensor x) {
    auto f1 = torch::relu(c1(x));
    auto f2 = torch::relu(c2(torch::avg_pool2d(f1, 2)));
    auto f3 = torch::relu(c3(torch::avg_pool2d(f2, 2)));
    return {f1, f2, f3};
  }
  torch::nn::Conv2d c1, c2, c3;
};
TORCH_MODULE(FeatureNet);

torch::Tensor load_image(const std::string &path, int64_t side) {
  std::cout << "loading " << path << '\n';
  return torch::rand({1, 3, side, side});
}

torch::Tensor gram(const torch::Tensor &f) {
  auto flat = f.flatten(2);  // [B, C, HW]
  return torch::bmm(flat, flat.transpose(1, 2)) / static_cast<double>(flat.size(2));
}

struct Targets {
  torch::Tensor content;
  std::vector<torch::Tensor> style;
};

struct StyleLosses {
  torch::Tensor content;
  torch::Tensor style;
  torch::Tensor total(double style_weight) const { return content + style_weight * style; }
};

StyleLosses compute_losses(FeatureNet &net, const torch::Tensor &image, const Targets &t) {
  auto feats = net->forward(image);
  StyleLosses l{torch::mse_loss(feats[1], t.content), torch::zeros({}, image.options())};
  for (size_t i = 0; i < feats.size(); ++i)
    // OK(torch-loss-accumulation-graph): a per-layer sum returned in a struct;
    // no backward() runs in this loop.
    l.style = l.style + torch::mse_loss(gram(feats[i]), t.style[i]);
  return l;
}

// Shows what the network sees in a thumbnail before a long run.
void preview(FeatureNet &net, const torch::Tensor &thumb) {
  torch::NoGradGuard no_grad;
  auto feats = net->forward(thumb);
  std::cout << "preview activations " << feats.back().abs().mean().item<double>() << '\n';
}

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  FeatureNet net;
  net->to(device);
  net->eval();
  // BUG(torch-device-mismatch): preview() calls 'net', moved to 'device'
  // above, with the host thumbnail from load_image().
  preview(net, load_image("style.jpg", 64));

  auto content = load_image("content.jpg", 256).to(device);
  auto style = load_image("style.jpg", 256).to(device);
  Targets targets;
  {
    torch::NoGradGuard no_grad;
    targets.content = net->forward(content)[1];
    for (const auto &f : net->forward(style))
      targets.style.push_back(gram(f));
  }

  auto image = content.clone().requires_grad_(true);
  torch::optim::Adam opt(std::vector<torch::Tensor>{image}, torch::optim::AdamOptions(0.02));
  for (int iteration = 0; iteration < 300; ++iteration) {
    opt.zero_grad();
    auto losses = compute_losses(net, image, targets);
    losses.total(1e4).backward();
    opt.step();
    // BUG(torch-host-sync-in-loop): printing a CUDA tensor copies it to the
    // host and waits for the GPU on every iteration.
    std::cout << "iteration " << iteration << " style " << losses.style << '\n';
  }
  torch::save(image.detach().cpu(), "stylised.pt");
  return 0;
}
