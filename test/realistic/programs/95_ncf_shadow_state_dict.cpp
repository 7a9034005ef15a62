// Neural collaborative filtering (a GMF term plus an MLP tower) trained with
// the BPR loss on implicit feedback. An exponential moving average of the
// weights is kept in a name-keyed shadow state dict and loaded into a
// second model for evaluation. Running metrics live in an unordered_map and
// are updated through find() iterators.
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

constexpr int64_t kUsers = 6040, kItems = 3706, kDim = 32;

using StateDict = std::unordered_map<std::string, torch::Tensor>;

struct NcfImpl : torch::nn::Module {
  NcfImpl()
      : user_emb(register_module("user_emb", torch::nn::Embedding(kUsers, kDim))),
        item_emb(register_module("item_emb", torch::nn::Embedding(kItems, kDim))),
        tower(register_module("tower", torch::nn::Sequential(torch::nn::Linear(2 * kDim, 64), torch::nn::ReLU(),
                                                             torch::nn::Linear(64, 1)))) {}
  torch::Tensor forward(const torch::Tensor &users, const torch::Tensor &items) {
    auto u = user_emb->forward(users);
    auto v = item_emb->forward(items);
    return (u * v).sum(1) + tower->forward(torch::cat({u, v}, 1)).squeeze(1);
  }
  torch::nn::Embedding user_emb, item_emb;
  torch::nn::Sequential tower;
};
TORCH_MODULE(Ncf);

StateDict snapshot(Ncf &m) {
  StateDict s;
  for (auto &p : m->named_parameters())
    s.emplace(p.key(), p.value().detach().clone());
  return s;
}

void ema_update(StateDict &shadow, Ncf &m, double decay) {
  torch::NoGradGuard no_grad;
  for (auto &p : m->named_parameters()) {
    auto it = shadow.find(p.key());
    // OK(torch-loss-accumulation-graph): parameters under no-grad, in place.
    it->second.mul_(decay).add_(p.value(), 1 - decay);
  }
}

void load_into(Ncf &m, const StateDict &s) {
  torch::NoGradGuard no_grad;
  for (auto &p : m->named_parameters())
    p.value().copy_(s.at(p.key()));
}

struct Triples {
  torch::Tensor users, pos, neg;
};

Triples sample_triples(std::mt19937 &rng, int64_t n) {
  std::uniform_int_distribution<int64_t> du(0, kUsers - 1), di(0, kItems - 1);
  std::vector<int64_t> u(n), p(n), q(n);
  for (int64_t i = 0; i < n; ++i) {
    u[i] = du(rng);
    p[i] = (u[i] * 7 + i) % kItems;  // stand-in for an observed interaction
    q[i] = di(rng);
  }
  auto opts = torch::TensorOptions().dtype(torch::kLong);
  return {torch::tensor(u, opts), torch::tensor(p, opts), torch::tensor(q, opts)};
}

int main() {
  torch::Device device(torch::kCPU);
  if (torch::cuda::is_available())
    device = torch::Device(torch::kCUDA);
  std::mt19937 rng(11);

  Ncf model;
  model->to(device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  StateDict shadow = snapshot(model);

  std::unordered_map<std::string, torch::Tensor> metrics{{"bpr", torch::zeros({}, device)},
                                                         {"reg", torch::zeros({}, device)}};
  for (int64_t step = 1; step <= 20000; ++step) {
    auto t = sample_triples(rng, 1024);
    auto u = t.users.to(device);
    auto pos = model->forward(u, t.pos.to(device));
    auto neg = model->forward(u, t.neg.to(device));
    auto bpr = -torch::log_sigmoid(pos - neg).mean();
    auto reg = 1e-4 * (pos.pow(2) + neg.pow(2)).mean();
    auto loss = bpr + reg;
    opt.zero_grad();
    loss.backward();
    opt.step();
    ema_update(shadow, model, 0.999);

    auto it = metrics.find("bpr");
    // BUG(torch-loss-accumulation-graph): the map outlives the loop and the
    // element keeps every step's BPR graph.
    it->second = it->second + bpr;
    auto jt = metrics.find("reg");
    // OK(torch-loss-accumulation-graph): detached first.
    jt->second += reg.detach();
    if (step % 1000 == 0) {
      // OK(torch-host-sync-in-loop): every 1000 steps.
      std::cout << "step " << step << " bpr " << (it->second / 1000).item<float>() << " reg "
                << (jt->second / 1000).item<float>() << "\n";
      it->second.zero_();
      jt->second.zero_();
    }
  }

  Ncf ema_model;
  ema_model->to(device);
  load_into(ema_model, shadow);
  ema_model->eval();

  torch::NoGradGuard no_grad;
  auto all_items = torch::arange(kItems, torch::TensorOptions().dtype(torch::kLong));
  int64_t hits = 0;
  for (int64_t u0 = 0; u0 < kUsers; u0 += 64) {
    const int64_t nu = std::min<int64_t>(64, kUsers - u0);
    auto users = torch::arange(u0, u0 + nu, torch::TensorOptions().dtype(torch::kLong).device(device));
    auto uu = users.repeat_interleave(kItems);
    auto ii = all_items.repeat({nu});
    // BUG(torch-device-mismatch): the candidate items were made on the host;
    // the EMA model was moved to the device.
    auto scores = ema_model->forward(uu, ii).view({nu, kItems});
    auto top = std::get<1>(scores.topk(10, 1));
    auto top_host = top.to(torch::kCPU, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the pointer is read while the copy
    // may still be in flight.
    const int64_t *rec = top_host.data_ptr<int64_t>();
    for (int64_t r = 0; r < nu; ++r)
      for (int64_t k = 0; k < 10; ++k)
        hits += rec[r * 10 + k] == ((u0 + r) * 7) % kItems;
  }
  std::cout << "hit@10 " << static_cast<double>(hits) / kUsers << "\n";

  auto emb_host = ema_model->item_emb->weight.to(torch::kCPU, /*non_blocking=*/true);
  if (device.is_cuda())
    torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised before the save reads it.
  torch::save(emb_host, "item_embeddings.pt");

  if (torch::cuda::is_available()) {
    // BUG(torch-device-index-unchecked): a second GPU is assumed for the
    // serving replica; the device count is never checked.
    torch::Device serve_dev("cuda:1");
    auto replica = std::dynamic_pointer_cast<NcfImpl>(ema_model->clone(serve_dev));
    torch::save(Ncf(replica), "ncf_serving.pt");
  }
  return 0;
}
