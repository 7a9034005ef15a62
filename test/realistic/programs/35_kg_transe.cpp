// Knowledge-graph embeddings with TransE: entities and relations share one
// vector space and a fact (h, r, t) should satisfy h + r ~ t. Triples are
// grouped by relation name in a std::map; two small metric objects collect
// the loss across calls; link prediction ranks every entity for each query,
// with a retry when the full score matrix does not fit.
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

struct TransEImpl : torch::nn::Module {
  TransEImpl(int64_t entities, int64_t relations, int64_t dim)
      : ent(register_module("ent", torch::nn::Embedding(entities, dim))),
        rel(register_module("rel", torch::nn::Embedding(relations, dim))) {}
  // Distance ||h + r - t||; small for true facts.
  torch::Tensor forward(const torch::Tensor &h, const torch::Tensor &r, const torch::Tensor &t) {
    return (ent(h) + rel(r) - ent(t)).norm(2, -1);
  }
  torch::nn::Embedding ent, rel;
};
TORCH_MODULE(TransE);

struct Triples {
  torch::Tensor head, rel, tail;
  Triples slice(int64_t from, int64_t to) const {
    return {head.slice(0, from, to), rel.slice(0, from, to), tail.slice(0, from, to)};
  }
  int64_t size() const { return head.size(0); }
};

std::map<std::string, Triples> load_triples(int64_t entities, torch::Device device) {
  std::map<std::string, Triples> by_relation;
  const std::vector<std::string> names{"born_in", "works_for", "capital_of"};
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  for (size_t r = 0; r < names.size(); ++r) {
    by_relation[names[r]] = Triples{torch::randint(0, entities, {4096}, opts),
                                    torch::full({4096}, static_cast<int64_t>(r), opts),
                                    torch::randint(0, entities, {4096}, opts)};
  }
  return by_relation;
}

// Every loss of the run, for the curve at the end.
class LossHistory {
 public:
  void add(const torch::Tensor &loss) {
    // BUG(torch-loss-accumulation-graph): train() hands every step's loss to
    // this member vector, which keeps each step's graph until the end.
    values_.push_back(loss);
  }
  double mean() const { return torch::stack(values_).mean().item<double>(); }

 private:
  std::vector<torch::Tensor> values_;
};

// An exponential moving average of the loss, for the progress line.
class SmoothedLoss {
 public:
  void add(const torch::Tensor &loss) {
    // OK(torch-loss-accumulation-graph): only the detached value is kept.
    value_ = value_.defined() ? 0.9 * value_ + 0.1 * loss.detach() : loss.detach();
  }
  const torch::Tensor &value() const { return value_; }

 private:
  torch::Tensor value_;
};

void train(TransE model, const std::map<std::string, Triples> &by_relation, int64_t entities, int64_t epochs,
           LossHistory &history, SmoothedLoss &smoothed) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(1e-2));
  std::unordered_map<std::string, double> per_relation;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    for (const auto &[name, triples] : by_relation) {
      auto corrupt = torch::randint_like(triples.tail, entities);
      auto pos = model->forward(triples.head, triples.rel, triples.tail);
      auto neg = model->forward(triples.head, triples.rel, corrupt);
      auto loss = torch::relu(1.0 + pos - neg).mean();
      opt.zero_grad();
      loss.backward();
      opt.step();
      // BUG(torch-host-sync-in-loop): one .item() per relation per epoch;
      // the host waits for every step.
      per_relation[name] += loss.item<double>();
      history.add(loss);
      smoothed.add(loss);
    }
  }
  for (const auto &[name, total] : per_relation)
    std::cout << name << ": mean margin loss " << total / static_cast<double>(epochs) << '\n';
}

// For each query (h, r, ?), the entities ordered by distance to h + r.
torch::Tensor rank_all(TransE model, const Triples &queries) {
  torch::NoGradGuard no_grad;
  auto hr = model->ent(queries.head) + model->rel(queries.rel);
  return torch::cdist(hr, model->ent->weight).argsort(/*dim=*/1, /*descending=*/false);
}

torch::Tensor rank_with_retry(TransE model, const Triples &queries) {
  try {
    return rank_all(model, queries);
  } catch (const c10::Error &e) {
    if (std::string(e.what()).find("out of memory") == std::string::npos)
      throw;
    // BUG(torch-empty-cache-oom-retry): the same queries are ranked again at
    // the same size; the allocator had already emptied its cache.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return rank_all(model, queries);
  }
}

torch::Tensor rank_in_halves(TransE model, const Triples &queries) {
  try {
    return rank_all(model, queries);
  } catch (const c10::OutOfMemoryError &) {
    // OK(torch-empty-cache-oom-retry): the retry ranks half the queries at a
    // time.
    c10::cuda::CUDACachingAllocator::emptyCache();
    const int64_t half = queries.size() / 2;
    return torch::cat({rank_all(model, queries.slice(0, half)), rank_all(model, queries.slice(half, queries.size()))});
  }
}

std::vector<float> sorted_distances(TransE model, const Triples &queries) {
  torch::NoGradGuard no_grad;
  auto dist = model->forward(queries.head, queries.rel, queries.tail);
  auto host = dist.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): data_ptr() reads the host buffer while
  // the copy from the device may still be running.
  const float *p = host.data_ptr<float>();
  std::vector<float> out(p, p + host.numel());
  std::sort(out.begin(), out.end());
  return out;
}

float worst_distance(TransE model, const Triples &queries) {
  torch::NoGradGuard no_grad;
  auto stream = c10::cuda::getCurrentCUDAStream();
  auto host = model->forward(queries.head, queries.rel, queries.tail).max().to(torch::kCPU, /*non_blocking=*/true);
  stream.synchronize();
  // OK(torch-non-blocking-d2h-race): the stream was synchronised first.
  return host.item<float>();
}

int main() {
  const int64_t entities = 20000;
  torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  TransE model(entities, 3, 64);
  model->to(device);

  auto by_relation = load_triples(entities, device);
  LossHistory history;
  SmoothedLoss smoothed;
  train(model, by_relation, entities, 50, history, smoothed);
  std::cout << "mean loss " << history.mean() << ", smoothed " << smoothed.value().item<double>() << '\n';

  const Triples &queries = by_relation.at("capital_of");
  auto ranks = rank_with_retry(model, queries.slice(0, 1024));
  auto ranks_all = rank_in_halves(model, queries);
  std::cout << "ranked " << ranks.size(0) << " + " << ranks_all.size(0) << " queries\n";

  auto d = sorted_distances(model, queries);
  std::cout << "median distance " << d[d.size() / 2] << ", worst " << worst_distance(model, queries) << '\n';
  return 0;
}
