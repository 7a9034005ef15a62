#pragma once
#include <torch/types.h>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace torch::data {
template <typename Data = Tensor, typename Target = Tensor> struct Example {
  Example() = default;
  Example(Data data, Target target);
  Data data;
  Target target;
};

namespace transforms {
template <typename T = Example<>> struct Stack {};
template <typename T = Example<>> struct Normalize {
  Normalize(double mean, double stddev);
};
} // namespace transforms

namespace datasets {
template <typename Source, typename Transform> class MapDataset {
public:
  using BatchType = Example<>;
  template <typename T> MapDataset<MapDataset, T> map(T transform) &&;
  size_t size() const;
};
class MNIST {
public:
  enum class Mode { kTrain, kTest };
  explicit MNIST(const std::string &root, Mode mode = Mode::kTrain);
  using BatchType = std::vector<Example<>>;
  template <typename T> MapDataset<MNIST, T> map(T transform) &&;
  size_t size() const;
};
} // namespace datasets

struct DataLoaderOptions {
  DataLoaderOptions(size_t batch_size);
  DataLoaderOptions &workers(size_t workers);
};

template <typename Batch> class Iterator {
public:
  Batch &operator*();
  Batch *operator->();
  Iterator &operator++();
  bool operator!=(const Iterator &other) const;
  bool operator==(const Iterator &other) const;
};

template <typename Dataset> class StatelessDataLoader {
public:
  using BatchType = typename Dataset::BatchType;
  Iterator<BatchType> begin();
  Iterator<BatchType> end();
};

template <typename Dataset>
std::unique_ptr<StatelessDataLoader<Dataset>> make_data_loader(Dataset dataset,
                                                               size_t batch_size);
template <typename Dataset>
std::unique_ptr<StatelessDataLoader<Dataset>> make_data_loader(Dataset dataset,
                                                               DataLoaderOptions options);
} // namespace torch::data
