// Molecular conformer generation with a denoising score model: the network
// sees atom types and noisy 3D coordinates and predicts the noise, trained
// at log-uniform noise levels; the sampler then anneals random coordinates
// down a fixed sigma ladder to produce one conformer per molecule, which is
// written as an .xyz block on the host. Molecules arrive from a stream whose
// next() returns std::optional<Batch>; the memory policy and the export
// precision are enums switched on by the loops.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

constexpr int64_t kAtomTypes = 10, kMaxAtoms = 24, kHid = 64;
const char *const kSymbols[kAtomTypes] = {"H", "C", "N", "O", "F", "P", "S", "Cl", "Br", "I"};

enum class MemoryPolicy { kKeepCache, kTrimEachEpoch };
enum class Precision { kFloat32, kFloat64 };

struct Batch {
  torch::Tensor atoms;   // [B, kMaxAtoms] long, 0-padded
  torch::Tensor coords;  // [B, kMaxAtoms, 3], Angstrom, centred
  torch::Tensor mask;    // [B, kMaxAtoms], 1 for real atoms
};

struct ScoreNetImpl : torch::nn::Module {
  ScoreNetImpl()
      : embed(register_module("embed", torch::nn::Embedding(kAtomTypes, kHid))),
        edge(register_module("edge", torch::nn::Sequential(torch::nn::Linear(2 + kHid, kHid), torch::nn::SiLU(),
                                                           torch::nn::Linear(kHid, kHid)))),
        coef(register_module("coef", torch::nn::Linear(kHid, 1))) {}

  // atoms [B, N], x [B, N, 3], mask [B, N], sigma [B] -> predicted noise [B, N, 3]
  torch::Tensor forward(const torch::Tensor &atoms, const torch::Tensor &x, const torch::Tensor &mask,
                        const torch::Tensor &sigma) {
    const int64_t n = x.size(1);
    auto h = embed->forward(atoms);                                              // [B, N, H]
    auto diff = x.unsqueeze(2) - x.unsqueeze(1);                                 // [B, N, N, 3]
    auto dist = diff.norm(2, -1, true);                                          // [B, N, N, 1]
    auto s = sigma.view({-1, 1, 1, 1}).expand_as(dist);
    auto hj = h.unsqueeze(1).expand({-1, n, -1, -1});                            // [B, N, N, H]
    auto e = edge->forward(torch::cat({dist, s, hj}, -1));                       // [B, N, N, H]
    auto pair = (mask.unsqueeze(2) * mask.unsqueeze(1)).unsqueeze(-1);           // [B, N, N, 1]
    return (diff * coef->forward(e) * pair).sum(2) / sigma.view({-1, 1, 1});
  }

  torch::nn::Embedding embed;
  torch::nn::Sequential edge;
  torch::nn::Linear coef;
};
TORCH_MODULE(ScoreNet);

// Synthetic molecules: zig-zag heavy-atom chains with hydrogens around them.
class MoleculeStream {
 public:
  MoleculeStream(int64_t molecules, int64_t batch, uint64_t seed) : molecules_(molecules), batch_(batch), seed_(seed) {}

  void reset() { cursor_ = 0; }

  std::optional<Batch> next() {
    if (cursor_ + batch_ > molecules_)
      return std::nullopt;
    std::mt19937 rng(static_cast<uint32_t>(seed_ * 7919 + cursor_));
    Batch b{torch::zeros({batch_, kMaxAtoms}, torch::kLong), torch::zeros({batch_, kMaxAtoms, 3}),
            torch::zeros({batch_, kMaxAtoms})};
    for (int64_t i = 0; i < batch_; ++i) {
      const int64_t n = 6 + static_cast<int64_t>(rng() % (kMaxAtoms - 6));
      for (int64_t a = 0; a < n; ++a) {
        b.atoms[i][a] = a % 3 == 2 ? 0 : 1 + static_cast<int64_t>(rng() % 3);
        b.coords[i][a][0] = 1.25 * a;
        b.coords[i][a][1] = (a % 2 == 0 ? 0.8 : -0.8) + 0.05 * static_cast<double>(rng() % 7);
        b.coords[i][a][2] = 0.1 * static_cast<double>(rng() % 5);
        b.mask[i][a] = 1.0;
      }
      auto real = b.coords[i].slice(0, 0, n);
      real.sub_(real.mean(0, true));
    }
    cursor_ += batch_;
    return b;
  }

 private:
  int64_t molecules_, batch_, cursor_ = 0;
  uint64_t seed_;
};

void train(ScoreNet &net, MoleculeStream &stream, torch::Device device, int epochs, MemoryPolicy policy) {
  net->train();
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(3e-4));
  const int64_t batch = 32;
  auto atoms_dev = torch::empty({batch, kMaxAtoms}, torch::TensorOptions().dtype(torch::kLong).device(device));
  auto coords_dev = torch::empty({batch, kMaxAtoms, 3}, torch::TensorOptions().device(device));
  int64_t step = 0, skipped = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    stream.reset();
    while (auto b = stream.next()) {
      if (b->atoms.is_pinned()) {
        // OK(torch-non-blocking-pageable): only pinned atom buffers go async.
        atoms_dev.copy_(b->atoms, /*non_blocking=*/true);
      } else {
        atoms_dev.copy_(b->atoms);
      }
      // BUG(torch-non-blocking-pageable): next() fills plain torch::zeros
      // coordinates, so this "async" copy is synchronous.
      coords_dev.copy_(b->coords, /*non_blocking=*/true);
      auto mask = b->mask.to(device);
      auto sigma = torch::exp(torch::empty({batch}, torch::TensorOptions().device(device)).uniform_(std::log(0.01), std::log(2.0)));
      auto eps = torch::randn_like(coords_dev) * mask.unsqueeze(-1);
      auto pred = net->forward(atoms_dev, coords_dev + sigma.view({-1, 1, 1}) * eps, mask, sigma);
      auto loss = ((pred - eps).pow(2).sum(-1) * mask).sum() / mask.sum();
      // BUG(torch-host-sync-in-loop): the NaN guard reads a flag back from the
      // device before every update.
      if (!torch::isfinite(loss).item<bool>()) {
        ++skipped;
        continue;
      }
      opt.zero_grad();
      loss.backward();
      opt.step();
      if (++step % 200 == 0) {
        // OK(torch-host-sync-in-loop): every 200 steps.
        std::cout << "epoch " << epoch << " step " << step << " loss " << loss.item<double>() << " skipped " << skipped << "\n";
      }
    }
    switch (policy) {
      case MemoryPolicy::kTrimEachEpoch:
        // BUG(torch-empty-cache-in-loop): runs once per epoch, then the next
        // epoch allocates the same blocks again.
        c10::cuda::CUDACachingAllocator::emptyCache();
        break;
      case MemoryPolicy::kKeepCache:
        break;
    }
  }
}

class ConformerSampler {
 public:
  ConformerSampler(ScoreNet net, torch::Device device, int64_t levels)
      : net_(std::move(net)), device_(device),
        sigmas_(torch::exp(torch::linspace(std::log(2.0), std::log(0.01), levels))) {}

  // One molecule (batch of 1) -> coordinates [1, kMaxAtoms, 3] on device_.
  torch::Tensor generate(const Batch &mol) {
    torch::NoGradGuard no_grad;
    auto atoms = mol.atoms.to(device_);
    auto mask = mol.mask.to(device_);
    // OK(torch-device-mismatch): sigmas_[0] is a 0-dim CPU tensor, which
    // element-wise ops accept next to a CUDA tensor.
    auto x = torch::randn({1, kMaxAtoms, 3}, torch::TensorOptions().device(device_)) * sigmas_[0];
    for (int64_t t = 0; t < sigmas_.size(0); ++t) {
      const double sigma = sigmas_[t].item<double>();
      const double step = 0.5 * sigma * sigma;
      auto eps = net_->forward(atoms, x, mask, torch::full({1}, sigma, torch::TensorOptions().device(device_)));
      // BUG(torch-device-mismatch): mol.mask is the caller's CPU tensor; the
      // moved copy is `mask`.
      eps = eps * mol.mask.unsqueeze(-1);
      x = x - step / sigma * eps + std::sqrt(step) * torch::randn_like(x) * mask.unsqueeze(-1);
    }
    return x;
  }

 private:
  ScoreNet net_;
  torch::Device device_;
  torch::Tensor sigmas_;
};

void write_xyz(std::ofstream &out, const Batch &mol, const torch::Tensor &xyz) {
  auto a = mol.atoms.accessor<int64_t, 2>();
  auto m = mol.mask.accessor<float, 2>();
  auto p = xyz.accessor<float, 3>();
  int64_t n = 0;
  while (n < kMaxAtoms && m[0][n] > 0)
    ++n;
  out << n << "\ngenerated\n";
  for (int64_t i = 0; i < n; ++i)
    out << kSymbols[a[0][i]] << ' ' << p[0][i][0] << ' ' << p[0][i][1] << ' ' << p[0][i][2] << '\n';
}

int main(int argc, char **argv) {
  torch::manual_seed(226);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  const MemoryPolicy policy = argc > 1 ? MemoryPolicy::kTrimEachEpoch : MemoryPolicy::kKeepCache;
  const Precision precision = argc > 2 ? Precision::kFloat64 : Precision::kFloat32;

  ScoreNet net;
  net->to(device);
  MoleculeStream train_stream(12800, 32, 1);
  train(net, train_stream, device, 10, policy);

  net->eval();
  ConformerSampler sampler(net, device, 300);
  MoleculeStream test_stream(64, 1, 2);
  std::vector<Batch> mols;
  while (auto b = test_stream.next())
    mols.push_back(*b);

  std::ofstream out("conformers.xyz");
  std::array<torch::Tensor, 2> host_xyz;
  for (size_t m = 0; m < mols.size(); ++m) {
    auto xyz = sampler.generate(mols[m]);
    switch (precision) {
      case Precision::kFloat64:
        // BUG(torch-tensor-to-discarded): the double copy is dropped; xyz
        // stays float32.
        xyz.to(torch::kDouble);
        break;
      case Precision::kFloat32:
        break;
    }
    host_xyz[m % 2] = xyz.to(torch::kCPU, /*non_blocking=*/true);
    if (m > 0) {
      // BUG(torch-non-blocking-d2h-race): nothing waited for the previous
      // molecule's copy; the sampler only queued more work since.
      write_xyz(out, mols[m - 1], host_xyz[(m - 1) % 2]);
    }
  }
  if (!mols.empty()) {
    if (device.is_cuda())
      c10::cuda::getCurrentCUDAStream().synchronize();
    // OK(torch-non-blocking-d2h-race): the stream was synchronised above.
    write_xyz(out, mols.back(), host_xyz[(mols.size() - 1) % 2]);
  }
  std::cout << "wrote " << mols.size() << " conformers\n";
  return 0;
}
