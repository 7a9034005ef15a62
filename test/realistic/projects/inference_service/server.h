#pragma once

#include "model.h"

#include <deque>
#include <vector>

struct Query {
  int64_t id;
  std::vector<float> features;
};

class Service {
 public:
  Service(Embedder model, torch::Device device) : model_(model), device_(device) {}
  void submit(Query q) { queue_.push_back(std::move(q)); }
  size_t serve();
  double reindex(int64_t chunks);
  torch::Tensor embed_catalogue(const torch::Tensor &catalogue);

 private:
  Embedder model_;
  torch::Device device_;
  std::deque<Query> queue_;
};
