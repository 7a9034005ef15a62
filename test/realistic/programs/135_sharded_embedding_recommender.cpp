// Two-tower retrieval for a music app: the user-id embedding table is split
// into shards on the GPUs listed in the deployment spec, the track catalogue's
// item vectors stay on the host (they are rebuilt nightly by another job),
// and a small interaction tower scores (user, dense context) pairs. Request
// ids arrive as int32 from the RPC layer; dense context goes through a
// staging pool whose slots are pinned or not depending on how the pool was
// built.
#include <torch/torch.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

constexpr int64_t kUsers = 200000, kTracks = 50000, kDim = 64, kDense = 16;

struct ShardedUserTableImpl : torch::nn::Module {
  ShardedUserTableImpl(int64_t rows, int64_t dim, std::vector<torch::Device> devices)
      : devices_(std::move(devices)) {
    const int64_t per = (rows + static_cast<int64_t>(devices_.size()) - 1) / static_cast<int64_t>(devices_.size());
    for (size_t s = 0; s < devices_.size(); ++s) {
      auto table = register_module("shard" + std::to_string(s), torch::nn::Embedding(per, dim));
      table->to(devices_[s]);
      shards_.push_back(table);
    }
    rows_per_shard_ = per;
  }

  // ids on the host; every row comes back on `out`.
  torch::Tensor lookup(const torch::Tensor &ids, const torch::Device &out) {
    auto result = torch::empty({ids.size(0), shards_.front()->options.embedding_dim()}, torch::TensorOptions().device(out));
    auto shard_of = ids.div(rows_per_shard_, "floor");
    for (size_t s = 0; s < shards_.size(); ++s) {
      auto mask = shard_of.eq(static_cast<int64_t>(s));
      auto local = ids.masked_select(mask) - static_cast<int64_t>(s) * rows_per_shard_;
      auto rows = shards_[s]->forward(local.to(devices_[s]));
      result.index_put_({mask.to(out)}, rows.to(out));
    }
    return result;
  }

 private:
  std::vector<torch::Device> devices_;
  std::vector<torch::nn::Embedding> shards_;
  int64_t rows_per_shard_ = 0;
};
TORCH_MODULE(ShardedUserTable);

std::vector<torch::Device> shard_devices() {
  // BUG(torch-device-index-unchecked): the spec names a second GPU, and
  // nothing compares it with torch::cuda::device_count().
  const std::vector<std::string> specs = {"cuda:0", "cuda:1"};
  std::vector<torch::Device> out;
  for (const auto &s : specs)
    out.emplace_back(s);
  return out;
}

class ItemCatalog {
 public:
  explicit ItemCatalog(int64_t n) : vectors_(torch::nn::functional::normalize(torch::randn({n, kDim}))) {}
  const torch::Tensor &matrix() const { return vectors_; }

 private:
  torch::Tensor vectors_;
};

class StagingPool {
 public:
  StagingPool(int64_t slots, int64_t rows, bool pinned) {
    for (int64_t i = 0; i < slots; ++i)
      slots_.push_back(torch::empty({rows, kDense}, torch::TensorOptions().pinned_memory(pinned)));
  }
  torch::Tensor &next() { return slots_[static_cast<size_t>(cursor_++ % static_cast<int64_t>(slots_.size()))]; }

 private:
  std::vector<torch::Tensor> slots_;
  int64_t cursor_ = 0;
};

struct InteractionTowerImpl : torch::nn::Module {
  InteractionTowerImpl()
      : mlp(register_module("mlp", torch::nn::Sequential(torch::nn::Linear(kDim + kDense, 128), torch::nn::ReLU(),
                                                         torch::nn::Linear(128, kDim)))) {}
  torch::Tensor forward(const torch::Tensor &x) { return torch::nn::functional::normalize(mlp->forward(x)); }
  torch::nn::Sequential mlp;
};
TORCH_MODULE(InteractionTower);

torch::Tensor score_candidates(const torch::Tensor &query, const torch::Tensor &items) {
  return torch::matmul(query, items.t());
}

torch::Tensor ids_from_request(std::vector<int32_t> &request_ids) {
  auto ids = torch::from_blob(request_ids.data(), {static_cast<int64_t>(request_ids.size())}, torch::kInt);
  // BUG(torch-tensor-to-discarded): the widened copy is thrown away; the
  // embedding lookup below gets int32 ids.
  ids.to(torch::kLong);
  return ids.clone();
}

int main() {
  if (!torch::cuda::is_available()) {
    std::cerr << "the sharded tables need CUDA devices\n";
    return 1;
  }
  const torch::Device tower_device(torch::kCUDA, 0);
  ShardedUserTable users(kUsers, kDim, shard_devices());
  InteractionTower tower;
  tower->to(tower_device);
  ItemCatalog catalog(kTracks);
  StagingPool staging(4, 256, /*pinned=*/true);

  std::vector<torch::Tensor> params = users->parameters();
  for (auto &p : tower->parameters())
    params.push_back(p);
  torch::optim::Adagrad opt(params, torch::optim::AdagradOptions(0.05));

  tower->train();
  for (int64_t step = 0; step < 2000; ++step) {
    auto ids = torch::randint(0, kUsers, {256}, torch::kLong);
    auto &ctx = staging.next();
    ctx.normal_();
    // OK(torch-non-blocking-pageable): the pool was built with pinned slots.
    auto dense = ctx.to(tower_device, /*non_blocking=*/true);
    auto user_vec = users->lookup(ids, tower_device);
    auto query = tower->forward(torch::cat({user_vec, dense}, 1));
    auto positives = torch::randint(0, kTracks, {256}, torch::kLong);
    auto pos_vec = catalog.matrix().index_select(0, positives).to(tower_device);
    auto logits = torch::matmul(query, pos_vec.t()) / 0.05;
    auto loss = torch::nn::functional::cross_entropy(logits, torch::arange(256, torch::TensorOptions().device(tower_device).dtype(torch::kLong)));
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 250 == 0)
      // OK(torch-host-sync-in-loop): a logging step.
      std::cout << "step " << step << " in-batch softmax " << loss.item<float>() << "\n";
  }

  tower->eval();
  torch::NoGradGuard no_grad;
  std::vector<int32_t> request = {17, 90211, 4, 150000, 77};
  auto req_ids = ids_from_request(request);
  auto user_vec = users->lookup(req_ids, tower_device);

  std::vector<float> context_row(static_cast<size_t>(req_ids.size(0) * kDense), 0.5f);
  auto context = torch::from_blob(context_row.data(), {req_ids.size(0), kDense});
  // BUG(torch-non-blocking-pageable): from_blob over a std::vector is
  // pageable memory; the copy runs synchronously.
  auto dense = context.to(tower_device, /*non_blocking=*/true);
  auto query = tower->forward(torch::cat({user_vec, dense}, 1));

  // BUG(torch-device-mismatch): the query is on the tower's GPU, the
  // catalogue matrix on the host; matmul inside the helper meets both.
  auto scores = score_candidates(query, catalog.matrix());
  auto top = std::get<1>(scores.topk(10, 1));

  auto cold = torch::zeros({req_ids.size(0), kDense});
  // BUG(torch-device-mismatch): the cold-start context row stays on the host
  // while the looked-up users are on tower_device.
  auto cold_query = tower->forward(torch::cat({user_vec, cold}, 1));
  std::cout << "top-10 for first user: " << top[0] << "\n" << cold_query.sizes() << "\n";
  return 0;
}
