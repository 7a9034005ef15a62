// A tabular classifier trained from an iterator-based shard loader, split
// over three files: loader.cpp reads (here: synthesises) the shards and the
// class weights, metrics.cpp holds the loss, the metrics and the prediction
// helpers, train.cpp runs the training loop and holds main().
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

constexpr int64_t kFeatures = 30;
constexpr int64_t kClasses = 5;

struct Batch {
  torch::Tensor features;  // [B, kFeatures], float
  torch::Tensor labels;    // [B], long
};

// A loader whose batches are produced lazily by an input iterator, so that a
// shard is only read when the loop reaches it.
class ShardLoader {
 public:
  class iterator {
   public:
    iterator(const ShardLoader *owner, int64_t index) : owner_(owner), index_(index) {}
    Batch operator*() const;  // loader.cpp
    iterator &operator++() {
      ++index_;
      return *this;
    }
    bool operator!=(const iterator &other) const { return index_ != other.index_; }
    int64_t index() const { return index_; }

   private:
    const ShardLoader *owner_;
    int64_t index_;
  };

  ShardLoader(int64_t batches, int64_t batch_size, uint64_t seed)
      : batches_(batches), batch_size_(batch_size), seed_(seed) {}
  iterator begin() const { return iterator(this, 0); }
  iterator end() const { return iterator(this, batches_); }
  int64_t batch_size() const { return batch_size_; }
  uint64_t seed() const { return seed_; }

 private:
  int64_t batches_;
  int64_t batch_size_;
  uint64_t seed_;
};

struct TabularNetImpl : torch::nn::Module {
  TabularNetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(kFeatures, 128))),
        bn(register_module("bn", torch::nn::BatchNorm1d(128))),
        fc2(register_module("fc2", torch::nn::Linear(128, kClasses))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear fc2;
};
TORCH_MODULE(TabularNet);

// loader.cpp
torch::Tensor class_weights();

// metrics.cpp
torch::Tensor weighted_loss(const torch::Tensor &logits, const torch::Tensor &labels, const torch::Tensor &weights);
double batch_accuracy(const torch::Tensor &logits, const torch::Tensor &labels);
double evaluate(TabularNet &net, const ShardLoader &loader, torch::Device device);
std::vector<int64_t> predict_all(TabularNet &net, const ShardLoader &loader, torch::Device device);
