#pragma once
// Mock of <torch/torch.h>: what the real umbrella header brings in.
#include <torch/autograd.h>
#include <torch/cuda.h>
#include <torch/data.h>
#include <torch/nn.h>
#include <torch/optim.h>
#include <torch/types.h>

namespace torch {
void save(const Tensor &tensor, const std::string &path);
template <typename M> void save(const M &module, const std::string &path);
void manual_seed(uint64_t seed);
namespace serialize {
class InputArchive {
public:
  void load_from(const std::string &filename);
  void load_from(const std::string &filename, Device device);
};
} // namespace serialize
// As in 2.x: the path and the device are forwarded through a pack.
template <typename Value, typename... LoadFromArgs>
void load(Value &value, LoadFromArgs &&...args) {
  serialize::InputArchive archive;
  archive.load_from(static_cast<LoadFromArgs &&>(args)...);
}
} // namespace torch
