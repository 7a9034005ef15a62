// Germline variant calling from read pileups: every candidate site becomes a
// [6, 33, 21] tensor (base, base quality, mapping quality, strand, reference
// match, insertion flag, over 33 reads and a 21-bp window) and a small CNN
// predicts its genotype (hom-ref, het, hom-alt). The backend comes from the
// run configuration, so the same binary runs on a laptop and on the cluster;
// calls are written as minimal VCF records.
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <functional>
#include <iostream>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace nn = torch::nn;
namespace F = torch::nn::functional;

namespace pileup {

constexpr int64_t kChannels = 6, kReads = 33, kWindow = 21, kGenotypes = 3;

enum class Backend { Cpu, Cuda, CudaN };

struct CallerConfig {
  Backend backend = Backend::Cuda;
  int gpu = 0;
  int epochs = 4;
  int64_t batch = 128;
  int64_t batches = 24;
};

torch::Device device_for(const CallerConfig &cfg) {
  switch (cfg.backend) {
    case Backend::Cpu:
      return torch::Device(torch::kCPU);
    case Backend::Cuda:
      if (!torch::cuda::is_available())
        throw std::runtime_error("backend=cuda but no CUDA device is visible");
      return torch::Device(torch::kCUDA);
    case Backend::CudaN:
      if (cfg.gpu < 0 || cfg.gpu >= static_cast<int>(torch::cuda::device_count()))
        throw std::runtime_error("backend=cuda:N names a GPU this job cannot see");
      // OK(torch-device-index-unchecked, torch-cuda-unguarded): the ordinal is
      // built at run time and was compared with device_count() just above.
      return torch::Device("cuda:" + std::to_string(cfg.gpu));
  }
  throw std::logic_error("unknown backend");
}

struct SiteBatch {
  torch::Tensor pileup;    // [B, 6, 33, 21]
  torch::Tensor genotype;  // [B] long
  torch::Tensor weight;    // [B] per-site weight from the read depth
};

// Simulated candidate sites; the production pipeline cuts them from a BAM.
SiteBatch simulate_sites(int64_t n) {
  auto genotype = torch::randint(0, kGenotypes, {n}, torch::kLong);
  auto pileup = torch::rand({n, kChannels, kReads, kWindow});
  pileup.select(3, kWindow / 2).select(1, 0).add_(genotype.to(torch::kFloat).view({n, 1}) * 0.3);
  auto depth = torch::randint(8, 60, {n}).to(torch::kFloat);
  return {pileup, genotype, (depth / 30.0).clamp(0.25, 1.0)};
}

// Depth-weighted genotype loss: low-coverage sites count less.
torch::Tensor weighted_genotype_loss(const torch::Tensor &per_site, const torch::Tensor &weight) {
  return (per_site * weight).sum() / weight.sum();
}

torch::Tensor phred_quality(const torch::Tensor &probs) {
  auto p_wrong = 1.0 - std::get<0>(probs.max(1));
  return (-10.0 * torch::log10(p_wrong.clamp_min(1e-6))).clamp_max(99.0);
}

struct PileupNetImpl : nn::Module {
  PileupNetImpl()
      : conv1(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(kChannels, 32, 3).padding(1)))),
        bn1(register_module("bn1", nn::BatchNorm2d(32))),
        conv2(register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)))),
        drop(register_module("drop", nn::Dropout(0.2))),
        head(register_module("head", nn::Linear(64, kGenotypes))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(bn1(conv1(x)));
    x = torch::relu(conv2(x));
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return head(drop(x));
  }
  nn::Conv2d conv1;
  nn::BatchNorm2d bn1;
  nn::Conv2d conv2;
  nn::Dropout drop;
  nn::Linear head;
};
TORCH_MODULE(PileupNet);

// Uploads batches through one page-locked pileup buffer (128 x 6 x 33 x 21
// floats, 2 MB), allocated once. Only built when the backend is a GPU.
class BatchStager {
 public:
  BatchStager(torch::Device device, int64_t batch)
      : device_(device),
        pinned_pileup_(torch::empty({batch, kChannels, kReads, kWindow}, torch::TensorOptions().pinned_memory(true))) {}

  SiteBatch stage(const SiteBatch &host) {
    pinned_pileup_.copy_(host.pileup);
    SiteBatch out;
    // OK(torch-non-blocking-pageable): the source is the page-locked member.
    out.pileup = pinned_pileup_.to(device_, /*non_blocking=*/true);
    // BUG(torch-non-blocking-pageable): the labels are read straight from
    // the pageable host batch; the "asynchronous" copy runs synchronously.
    out.genotype = host.genotype.to(device_, /*non_blocking=*/true);
    out.weight = host.weight;
    return out;
  }

 private:
  torch::Device device_;
  torch::Tensor pinned_pileup_;
};

// Running per-genotype loss over an epoch, kept on the device.
struct GenotypeLedger {
  std::array<torch::Tensor, kGenotypes> loss_sum;
  std::array<torch::Tensor, kGenotypes> sites;
};

using ProgressFn = std::function<void(int64_t step, const torch::Tensor &probs)>;

struct CallBlock {
  torch::Tensor genotype;
  torch::Tensor quality;
};

class GenotypeTrainer {
 public:
  GenotypeTrainer(PileupNet net, torch::Device device, int64_t batch)
      : net_(net), device_(device), opt_(net->parameters(), torch::optim::AdamWOptions(3e-4).weight_decay(1e-4)) {
    if (device_.is_cuda())
      stager_.emplace(device_, batch);
  }

  void fit_epoch(const std::vector<SiteBatch> &batches, int epoch, const ProgressFn &progress) {
    net_->train();
    GenotypeLedger ledger;
    for (int64_t g = 0; g < kGenotypes; ++g) {
      ledger.loss_sum[g] = torch::zeros({}, device_);
      ledger.sites[g] = torch::zeros({}, torch::TensorOptions().device(device_).dtype(torch::kLong));
    }
    std::vector<torch::Tensor> step_losses;
    for (const auto &host : batches) {
      SiteBatch batch = stager_ ? stager_->stage(host) : host;
      opt_.zero_grad();
      auto logits = net_->forward(batch.pileup);
      auto per_site = F::cross_entropy(logits, batch.genotype, F::CrossEntropyFuncOptions().reduction(torch::kNone));
      // BUG(torch-device-mismatch): the stager never moved the depth
      // weights; they meet the per-site loss inside weighted_genotype_loss().
      auto loss = weighted_genotype_loss(per_site, batch.weight);
      loss.backward();
      opt_.step();
      for (int64_t g = 0; g < kGenotypes; ++g) {
        auto mask = batch.genotype == g;
        // BUG(torch-loss-accumulation-graph): per_site is not detached; each
        // genotype's epoch sum keeps every step's graph alive.
        ledger.loss_sum[g] += per_site.masked_select(mask).sum();
        ledger.sites[g] += mask.sum();
      }
      // OK(torch-loss-accumulation-graph): detached before it is kept.
      step_losses.push_back(loss.detach());
      progress(step_++, torch::softmax(logits.detach(), 1));
    }
    auto total = std::accumulate(step_losses.begin(), step_losses.end(), torch::zeros({}, device_));
    // OK(torch-host-sync-in-loop): one read per epoch, after the loop.
    std::cout << "epoch " << epoch << " loss " << (total / static_cast<double>(step_losses.size())).item<double>();
    for (int64_t g = 0; g < kGenotypes; ++g)
      std::cout << " gt" << g << " " << (ledger.loss_sum[g] / ledger.sites[g].clamp_min(1)).item<double>();
    std::cout << '\n';
  }

  // Genotype calls for the held-out sites, one VCF data line each.
  void call_variants(const std::vector<SiteBatch> &batches, std::ostream &vcf) {
    net_->eval();
    torch::NoGradGuard no_grad;
    int64_t site = 0;
    for (const auto &host : batches) {
      auto probs = torch::softmax(net_->forward(host.pileup.to(device_)), 1);
      auto qual = phred_quality(probs).to(torch::kCPU);
      CallBlock block{probs.argmax(1).to(torch::kCPU, /*non_blocking=*/true), qual};
      // BUG(torch-non-blocking-d2h-race): the genotype copy was only queued;
      // the accessor reads the host buffer before it has landed.
      auto gt = block.genotype.accessor<int64_t, 1>();
      auto gq = block.quality.accessor<float, 1>();
      static const char *kGt[] = {"0/0", "0/1", "1/1"};
      for (int64_t i = 0; i < gt.size(0); ++i, ++site)
        if (gt[i] != 0)
          vcf << "chr20\t" << 1000000 + 37 * site << "\t.\tA\tG\t" << gq[i] << "\tPASS\t.\tGT\t" << kGt[gt[i]] << '\n';
    }
  }

 private:
  PileupNet net_;
  torch::Device device_;
  torch::optim::AdamW opt_;
  std::optional<BatchStager> stager_;
  int64_t step_ = 0;
};

Backend parse_backend(const std::string &s) {
  return s == "cpu" ? Backend::Cpu : s.rfind("cuda:", 0) == 0 ? Backend::CudaN : Backend::Cuda;
}

}  // namespace pileup

int main(int argc, char **argv) {
  using namespace pileup;
  CallerConfig cfg;
  if (argc > 1) {
    cfg.backend = parse_backend(argv[1]);
    if (cfg.backend == Backend::CudaN)
      cfg.gpu = std::stoi(std::string(argv[1]).substr(5));
  }
  torch::manual_seed(308);
  const torch::Device device = device_for(cfg);

  std::vector<SiteBatch> train, held_out;
  for (int64_t i = 0; i < cfg.batches; ++i)
    train.push_back(simulate_sites(cfg.batch));
  for (int64_t i = 0; i < 4; ++i)
    held_out.push_back(simulate_sites(cfg.batch));

  PileupNet net;
  net->to(device);
  GenotypeTrainer trainer(net, device, cfg.batch);

  double het_rate = 0.0;
  auto progress = [&het_rate](int64_t step, const torch::Tensor &probs) {
    // BUG(torch-host-sync-in-loop): a blocking copy of the batch's
    // probabilities to the host on every training step.
    auto host = probs.to(torch::kCPU);
    const float *p = host.data_ptr<float>();
    int64_t het = 0;
    for (int64_t i = 0; i < host.size(0); ++i)
      het += p[i * kGenotypes + 1] > 0.5f ? 1 : 0;
    het_rate = 0.98 * het_rate + 0.02 * static_cast<double>(het) / static_cast<double>(host.size(0));
    if (step % 50 == 0)
      std::cout << "step " << step << " het-call rate " << het_rate << '\n';
  };
  for (int epoch = 0; epoch < cfg.epochs; ++epoch)
    trainer.fit_epoch(train, epoch, progress);

  std::cout << "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\tSAMPLE\n";
  trainer.call_variants(held_out, std::cout);
  torch::save(net, "pileup_net.pt");
}
