// A click-through-rate model whose large embedding table lives on its own
// GPU while the dense layers run on another. Cluster jobs get one to four
// GPUs depending on the queue.
#include <torch/torch.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>

struct Placement {
  torch::Device embedding;
  torch::Device dense;

  static torch::Device embedding_device() {
    // BUG(torch-device-index-unchecked): ordinal 1 is hard-coded and no
    // device_count() comparison guards it.
    return {torch::kCUDA, 1};
  }

  static Placement for_this_machine() {
    const auto gpus = torch::cuda::device_count();
    // OK(torch-device-index-unchecked): the ordinal is chosen from the count.
    torch::Device dense(torch::kCUDA, gpus > 1 ? 1 : 0);
    return {torch::Device(torch::kCUDA, 0), dense};
  }
};

struct CtrModelImpl : torch::nn::Module {
  CtrModelImpl(int64_t rows, int64_t dim, Placement placement)
      : placement_(placement),
        table(register_module("table", torch::nn::Embedding(rows, dim))),
        mlp(register_module("mlp", torch::nn::Sequential(torch::nn::Linear(dim * 4, 256), torch::nn::ReLU(),
                                                         torch::nn::Linear(256, 1)))) {
    table->to(placement_.embedding);
    mlp->to(placement_.dense);
  }
  torch::Tensor forward(torch::Tensor ids) {  // ids: [B, 4]
    auto emb = table(ids.to(placement_.embedding)).flatten(1);
    return mlp->forward(emb.to(placement_.dense)).squeeze(1);
  }
  Placement placement_;
  torch::nn::Embedding table;
  torch::nn::Sequential mlp;
};
TORCH_MODULE(CtrModel);

torch::Tensor hash_features(int64_t batch, int64_t rows) {
  return torch::randint(0, rows, {batch, 4}, torch::kLong);
}

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "needs at least one GPU\n";
    return 1;
  }
  const int64_t rows = 1 << 20, dim = 32;
  Placement placement{Placement::embedding_device(), torch::Device(torch::kCUDA, 0)};
  if (std::getenv("CTR_AUTO_PLACEMENT"))
    placement = Placement::for_this_machine();

  CtrModel model(rows, dim, placement);
  torch::optim::Adagrad table_opt(model->table->parameters(), torch::optim::AdagradOptions(1e-2));
  torch::optim::Adam dense_opt(model->mlp->parameters(), torch::optim::AdamOptions(1e-3));
  auto running = torch::zeros({}, placement.dense);
  for (int64_t step = 1; step <= 2000; ++step) {
    auto ids = hash_features(512, rows);
    auto clicks = torch::rand({512}, placement.dense).lt(0.05).to(torch::kFloat);
    auto loss = torch::binary_cross_entropy_with_logits(model->forward(ids), clicks);
    table_opt.zero_grad();
    dense_opt.zero_grad();
    loss.backward();
    table_opt.step();
    dense_opt.step();
    running += loss.detach();
    if (step % 500 == 0) {
      std::cout << "step " << step << " loss " << (running / 500).item<double>() << '\n';
      running.zero_();
    }
  }

  // A quick look at the table's norm on a third GPU used for analysis jobs.
  torch::NoGradGuard no_grad;
  // BUG(torch-device-index-unchecked): "cuda:2" exists only on nodes with
  // three visible GPUs; nothing checks device_count().
  auto analysis = torch::TensorOptions().dtype(torch::kFloat).device("cuda:2");
  auto sample_rows = model->table->weight.narrow(0, 0, 4096).to(analysis);
  std::cout << "mean row norm " << sample_rows.norm(2, 1).mean().item<double>() << '\n';
  return 0;
}
