// A denoising autoencoder whose training recipe is a std::variant of
// configurations (plain SGD with momentum, or Adam with a gradient-accumulation
// factor). std::visit dispatches to an overloaded visitor that builds the
// optimizer and runs the recipe. A second GPU, when the machine has one,
// evaluates the reconstruction error in parallel with the next experiment.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <variant>

struct SgdRecipe {
  double lr = 0.05;
  double momentum = 0.9;
  int64_t steps = 800;
};

struct AdamRecipe {
  double lr = 1e-3;
  int64_t accum = 4;
  int64_t steps = 800;
};

using Recipe = std::variant<SgdRecipe, AdamRecipe>;

struct DaeImpl : torch::nn::Module {
  DaeImpl()
      : enc(register_module("enc", torch::nn::Linear(64, 16))),
        dec(register_module("dec", torch::nn::Linear(16, 64))) {}
  torch::Tensor forward(torch::Tensor x) { return dec(torch::relu(enc(x))); }
  torch::nn::Linear enc, dec;
};
TORCH_MODULE(Dae);

torch::Tensor corrupt(const torch::Tensor &x) { return x * (torch::rand_like(x) > 0.25).to(x.scalar_type()); }

struct RecipeRunner {
  Dae &net;
  torch::Device device;

  double operator()(const SgdRecipe &r) {
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(r.lr).momentum(r.momentum));
    torch::Tensor last;
    for (int64_t s = 0; s < r.steps; ++s) {
      auto clean = torch::rand({128, 64}, torch::TensorOptions().device(device));
      opt.zero_grad();
      // OK(torch-device-mismatch): corrupt() keeps its argument's device.
      auto loss = torch::mse_loss(net->forward(corrupt(clean)), clean);
      loss.backward();
      opt.step();
      // OK(torch-loss-accumulation-graph): the last value replaces the
      // previous one; nothing accumulates.
      last = loss.detach();
    }
    // OK(torch-host-sync-in-loop): one read after the recipe.
    return last.item<double>();
  }

  double operator()(const AdamRecipe &r) {
    torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(r.lr));
    opt.zero_grad();
    double sum = 0.0;
    for (int64_t s = 0; s < r.steps; ++s) {
      auto clean = torch::rand({32, 64}, torch::TensorOptions().device(device));
      auto loss = torch::mse_loss(net->forward(corrupt(clean)), clean) / static_cast<double>(r.accum);
      loss.backward();
      if ((s + 1) % r.accum == 0) {
        opt.step();
        opt.zero_grad();
      }
      // BUG(torch-host-sync-in-loop): the running sum reads the loss back on
      // every micro-batch.
      sum += loss.item<double>() * static_cast<double>(r.accum);
    }
    return sum / static_cast<double>(r.steps);
  }
};

// Reconstruction error on the auxiliary GPU, with its own copy of the model.
double aux_eval(Dae &net) {
  torch::NoGradGuard no_grad;
  // BUG(torch-device-index-unchecked): ordinal 1 is assumed to exist; on a
  // one-GPU node (or with CUDA_VISIBLE_DEVICES=0) this throws.
  torch::Device aux("cuda:1");
  auto copy = std::dynamic_pointer_cast<DaeImpl>(net->clone(aux));
  double err = 0.0;
  for (int i = 0; i < 10; ++i) {
    auto clean = torch::rand({256, 64}, torch::TensorOptions().device(aux));
    // OK(torch-inference-without-no-grad): the guard above covers the loop.
    auto rec = copy->forward(clean);
    err += (rec - clean).pow(2).mean().item<double>();
  }
  return err / 10.0;
}

int main(int argc, char **argv) {
  torch::manual_seed(5);
  const bool gpu = torch::cuda::is_available();
  // OK(torch-cuda-unguarded): chosen only when CUDA is available.
  torch::Device device = gpu ? torch::Device("cuda:0") : torch::Device(torch::kCPU);
  const std::string which = argc > 1 ? argv[1] : "adam";

  Recipe recipe = which == "sgd" ? Recipe(SgdRecipe{}) : Recipe(AdamRecipe{});
  Dae net;
  net->to(device);
  net->train();
  RecipeRunner runner{net, device};
  const double final_loss = std::visit(runner, recipe);
  std::cout << which << " final loss " << final_loss << '\n';

  auto probe = torch::rand({16, 64});
  {
    torch::NoGradGuard no_grad;
    // BUG(torch-device-mismatch): 'net' is on 'device', the probe batch was
    // made on the host.
    auto rec = net->forward(probe);
    std::cout << "probe error " << (rec.cpu() - probe).abs().mean().item<double>() << '\n';
  }
  if (gpu)
    std::cout << "aux error " << aux_eval(net) << '\n';
  return 0;
}
