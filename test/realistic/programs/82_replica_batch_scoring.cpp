// Offline batch scoring of a large candidate table with one model replica
// per visible GPU. Shards are dealt round-robin to the replicas; each
// replica's calibrated scores come back into a pair of pinned host slots
// (a std::array) so the copy of one shard overlaps the next forward, and a
// list of end-of-shard callbacks does the bookkeeping. A --debug flag pins
// a spare replica to the second GPU for A/B comparisons.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <variant>
#include <vector>

constexpr int64_t kIn = 96;
constexpr int64_t kOut = 4;
constexpr int64_t kShard = 4096;

struct ScorerImpl : torch::nn::Module {
  ScorerImpl()
      : net(register_module("net", torch::nn::Sequential(torch::nn::Linear(kIn, 256), torch::nn::GELU(),
                                                         torch::nn::Linear(256, kOut)))) {}
  torch::Tensor forward(const torch::Tensor &x) { return net->forward(x); }
  torch::nn::Sequential net;
};
TORCH_MODULE(Scorer);

std::vector<torch::Device> visible_devices() {
  std::vector<torch::Device> out;
  for (int64_t i = 0; i < static_cast<int64_t>(torch::cuda::device_count()); ++i)
    // OK(torch-device-index-unchecked, torch-cuda-unguarded): the loop bound
    // is the device count.
    out.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
  if (out.empty())
    out.emplace_back(torch::kCPU);
  return out;
}

Scorer debug_replica(const Scorer &prod) {
  auto copy = std::dynamic_pointer_cast<ScorerImpl>(prod->clone());
  // BUG(torch-cuda-unguarded): the spare replica goes to a GPU without an
  // availability check on the --debug path.
  // BUG(torch-device-index-unchecked): ordinal 1 is hard-coded and never
  // compared with the device count.
  copy->to(torch::Device("cuda:1"));
  return Scorer(copy);
}

void write_scores(std::ofstream &out, const torch::Tensor &host) {
  auto acc = host.accessor<float, 2>();
  for (int64_t i = 0; i < acc.size(0); ++i)
    out << acc[i][0] << "," << acc[i][1] << "," << acc[i][2] << "," << acc[i][3] << "\n";
}

int main(int argc, char **argv) {
  auto devices = visible_devices();
  Scorer prod;
  std::vector<Scorer> replicas;
  for (auto &&d : devices) {
    auto r = std::dynamic_pointer_cast<ScorerImpl>(prod->clone());
    r->to(d);
    r->eval();
    replicas.emplace_back(r);
  }
  const bool on_gpu = devices.front().is_cuda();
  std::array<torch::Tensor, 2> host_slots;
  for (auto &slot : host_slots)
    slot = torch::empty({kShard, kOut}, torch::TensorOptions().pinned_memory(on_gpu));
  // Calibration: one temperature for all classes, or one per class.
  std::variant<double, torch::Tensor> temperature = torch::full({1, kOut}, 1.5);

  std::ofstream out("scores.csv");
  std::vector<std::function<void(int64_t)>> on_shard_done;
  on_shard_done.push_back([](int64_t shard) {
    if (shard % 100 == 0)
      std::cout << "shard " << shard << "\n";
  });
  on_shard_done.push_back([](int64_t) {
    // BUG(torch-empty-cache-in-loop): run after every shard by the range-for
    // over the callbacks.
    c10::cuda::CUDACachingAllocator::emptyCache();
  });

  std::vector<torch::Tensor> alarms;
  c10::InferenceMode guard;
  const int64_t shards = 512;
  for (int64_t k = 0; k < shards; ++k) {
    auto &&replica = replicas[k % static_cast<int64_t>(replicas.size())];
    auto x = torch::randn({kShard, kIn}).to(devices[k % static_cast<int64_t>(devices.size())]);
    // OK(torch-inference-without-no-grad): InferenceMode is held for the loop.
    auto logits = replica->forward(x);
    // BUG(torch-device-mismatch): the per-class temperature in the variant
    // stays on the host while the replica's logits are on its GPU.
    auto confident = (torch::sigmoid(logits / std::get<torch::Tensor>(temperature)) > 0.9).sum(0);
    alarms.push_back(confident.to(torch::kCPU));
    auto &slot = host_slots[k % 2];
    slot.copy_(logits, /*non_blocking=*/true);
    // BUG(torch-non-blocking-d2h-race): the slot is read before the
    // asynchronous copy into it is known to be done.
    write_scores(out, slot);
    for (auto &cb : on_shard_done)
      cb(k);
  }

  std::cout << "confident per class " << torch::stack(alarms).sum(0) << "\n";
  if (argc > 1 && std::string(argv[1]) == "--debug") {
    auto spare = debug_replica(prod);
    auto probe = torch::randn({8, kIn}).to(spare->parameters().front().device());
    auto a = spare->forward(probe);
    auto b = replicas.front()->forward(probe.to(devices.front()));
    auto host_a = a.to(torch::kCPU, /*non_blocking=*/true);
    auto host_b = b.to(torch::kCPU);
    if (on_gpu)
      torch::cuda::synchronize();
    // OK(torch-non-blocking-d2h-race): synchronised before the comparison.
    std::cout << "max diff " << (host_a - host_b).abs().max().item<float>() << "\n";
  }
  return 0;
}
