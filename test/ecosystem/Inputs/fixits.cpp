// One finding per kind of fix-it: two safe ones (on the warning) and an
// unsafe one (on a note). test/ecosystem/fix-safety.test.
#include <torch/torch.h>
#include <vector>

struct NetImpl : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};
TORCH_MODULE(Net);

std::vector<torch::Tensor> load_batches();
void report(const torch::Tensor &t);

torch::Tensor to_host(torch::Tensor x) {
  x.cpu();
  return x;
}

void train(Net &net, torch::optim::SGD &opt) {
  torch::Tensor total_loss = torch::zeros({});
  for (const auto &x : load_batches()) {
    opt.zero_grad();
    auto loss = net->forward(x).sum();
    loss.backward();
    opt.step();
    total_loss += loss;
  }
  report(total_loss);
}

torch::Tensor upload() {
  auto x = torch::randn({64, 3, 224, 224});
  if (!torch::cuda::is_available())
    return x;
  return x.to(torch::kCUDA, /*non_blocking=*/true);
}
