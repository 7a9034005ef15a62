// Germline small-variant calling in the style of DeepVariant: each candidate
// site becomes a pileup tensor (6 channels: base, base quality, mapping
// quality, strand, supports-alt, differs-from-reference; 64 reads x 101 bp)
// and a CNN classifies it as hom-ref, het or hom-alt. Pileups are simulated
// from the genotype's expected alt-allele fraction. The run configuration is a
// struct whose device field is set for the cluster's GPU nodes; a StepTimer
// RAII object times each training step; candidates are grouped per contig in a
// std::map and called in half precision; calls are staged for the VCF writer.
#include <ATen/cuda/CUDAEvent.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace F = torch::nn::functional;
using torch::indexing::Slice;

constexpr int64_t kChannels = 6, kReads = 64, kWidth = 101, kGenotypes = 3;

struct CallerConfig {
  torch::Device device{torch::kCPU};
  int64_t train_steps = 3000, batch = 64, per_contig = 512;
  std::vector<std::string> contigs{"chr20", "chr21", "chr22"};
};

CallerConfig gpu_node_config(int argc, char **argv) {
  CallerConfig cfg;
  // BUG(torch-cuda-unguarded): written for the cluster's GPU nodes; nothing
  // checks is_available() before every tensor is sent to CUDA.
  cfg.device = torch::Device(torch::kCUDA);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--second-gpu" && torch::cuda::device_count() > 1)
      // OK(torch-device-index-unchecked): device_count() was compared first.
      cfg.device = torch::Device(torch::kCUDA, 1);
    else if (arg == "--steps" && i + 1 < argc)
      cfg.train_steps = std::stoll(argv[++i]);
  }
  return cfg;
}

// Pileups [n,C,R,W] and genotypes [n] (0 hom-ref, 1 het, 2 hom-alt).
std::pair<torch::Tensor, torch::Tensor> simulate_sites(int64_t n) {
  auto genotype = torch::randint(0, kGenotypes, {n}, torch::kLong);
  auto alt_fraction = (genotype.to(torch::kFloat) * 0.5).clamp(0.02, 0.98).unsqueeze(1);
  auto supports_alt = (torch::rand({n, kReads}) < alt_fraction).to(torch::kFloat);
  auto pileup = 0.1 * torch::randn({n, kChannels, kReads, kWidth});
  pileup.index_put_({Slice(), 1}, torch::rand({n, kReads, kWidth}) * 0.4 + 0.6);  // base quality
  pileup.index_put_({Slice(), 2}, torch::rand({n, kReads, 1}).expand({n, kReads, kWidth}));  // mapping quality
  pileup.index_put_({Slice(), 4, Slice(), kWidth / 2}, supports_alt);
  auto errors = (torch::rand({n, kReads}) < 0.01).to(torch::kFloat);
  pileup.index_put_({Slice(), 5, Slice(), kWidth / 2}, torch::clamp(supports_alt + errors, 0.0, 1.0));
  return {pileup, genotype};
}

torch::nn::Sequential make_pileup_cnn() {
  torch::nn::Sequential seq;
  const int64_t widths[] = {kChannels, 32, 64, 128};
  for (int i = 0; i < 3; ++i) {
    seq->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(widths[i], widths[i + 1], 3).padding(1).bias(false)));
    seq->push_back(torch::nn::BatchNorm2d(widths[i + 1]));
    seq->push_back(torch::nn::ReLU());
    seq->push_back(torch::nn::MaxPool2d(2));
  }
  seq->push_back(torch::nn::AdaptiveAvgPool2d(1));
  seq->push_back(torch::nn::Flatten());
  seq->push_back(torch::nn::Linear(128, kGenotypes));
  return seq;
}

// Wall time of one training step; waits for the GPU so the number is real.
class StepTimer {
 public:
  explicit StepTimer(double &total_ms) : total_ms_(total_ms), start_(std::chrono::steady_clock::now()) {}
  ~StepTimer() {
    // BUG(torch-host-sync-in-loop): train() declares a StepTimer in its loop,
    // so this runs at the end of every training step.
    torch::cuda::synchronize();
    total_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  double &total_ms_;
  std::chrono::steady_clock::time_point start_;
};

void train(torch::nn::Sequential &net, const CallerConfig &cfg) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4));
  double step_ms = 0.0;
  net->train();
  for (int64_t step = 1; step <= cfg.train_steps; ++step) {
    StepTimer timer(step_ms);
    auto [pileup, genotype] = simulate_sites(cfg.batch);
    auto logits = net->forward(pileup.to(cfg.device));
    auto loss = F::cross_entropy(logits, genotype.to(cfg.device));
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 200 == 0)
      // OK(torch-host-sync-in-loop): logged every 200 steps.
      std::cout << "step " << step << " loss " << loss.item<float>() << " " << step_ms / step << " ms/step\n";
  }
}

struct ContigBatch {
  std::vector<int64_t> positions;
  torch::Tensor pileups, truth, log_prior;  // [n,C,R,W], [n], [1,kGenotypes]
};

std::map<std::string, ContigBatch> make_candidates(const CallerConfig &cfg) {
  std::map<std::string, ContigBatch> out;
  int64_t pos = 1000000;
  for (const auto &contig : cfg.contigs) {
    ContigBatch cb;
    auto [pileups, truth] = simulate_sites(cfg.per_contig);
    for (int64_t i = 0; i < cfg.per_contig; ++i) cb.positions.push_back(pos += 137);
    cb.pileups = pileups;
    cb.truth = truth;
    cb.log_prior = torch::log(torch::tensor({0.9985, 0.001, 0.0005})).view({1, kGenotypes});
    out.emplace(contig, std::move(cb));
  }
  return out;
}

struct StagedCalls {
  std::string contig;
  std::vector<int64_t> positions;
  torch::Tensor probs;  // host [n, kGenotypes]
};

void call_variants(torch::nn::Sequential &net, const CallerConfig &cfg, std::ostream &vcf) {
  torch::NoGradGuard no_grad;
  net->eval();
  net->to(torch::kHalf);
  std::vector<StagedCalls> staged;
  for (const auto &[contig, cb] : make_candidates(cfg)) {
    auto x = cb.pileups.to(cfg.device);
    // BUG(torch-tensor-to-discarded): the half-precision copy is dropped, so
    // the half model still gets the float pileups.
    x.to(torch::kHalf);
    auto logits = net->forward(x).to(torch::kFloat);
    // BUG(torch-device-mismatch): the contig prior is the CPU tensor built in
    // make_candidates(); the logits are on cfg.device.
    auto posterior = (logits.log_softmax(1) + cb.log_prior).softmax(1);
    staged.push_back({contig, cb.positions, posterior.to(torch::kCPU, /*non_blocking=*/true)});
  }
  for (const auto &calls : staged) {
    // BUG(torch-non-blocking-d2h-race): the posteriors were copied
    // non_blocking and nothing waited before the accessor reads them.
    auto p = calls.probs.accessor<float, 2>();
    for (size_t i = 0; i < calls.positions.size(); ++i) {
      const int64_t gt = p[i][1] > p[i][2] ? (p[i][1] > p[i][0] ? 1 : 0) : (p[i][2] > p[i][0] ? 2 : 0);
      if (gt == 0) continue;
      vcf << calls.contig << '\t' << calls.positions[i] << "\t.\tA\tG\t" << static_cast<int>(-10 * std::log10(1 - p[i][gt] + 1e-6))
          << "\tPASS\t.\tGT\t" << (gt == 1 ? "0/1" : "1/1") << "\n";
    }
  }
  net->to(torch::kFloat);
  net->train();
}

// Interactive re-call of one site for the curation UI.
void explain_site(torch::nn::Sequential &net, const CallerConfig &cfg) {
  torch::NoGradGuard no_grad;
  net->eval();
  auto [pileup, truth] = simulate_sites(1);
  // BUG(torch-non-blocking-pageable): simulate_sites() builds the pileup in
  // ordinary pageable memory, so this upload is synchronous anyway.
  auto probs = net->forward(pileup.to(cfg.device, /*non_blocking=*/true)).softmax(1);
  auto host = probs.to(torch::kCPU, /*non_blocking=*/true);
  at::cuda::CUDAEvent copied;
  copied.record();
  copied.synchronize();
  // OK(torch-non-blocking-d2h-race): the event recorded after the copy was waited on.
  std::cout << "truth " << truth.item<int64_t>() << " probs " << host << "\n";
  net->train();
}

int main(int argc, char **argv) {
  torch::manual_seed(217);
  const CallerConfig cfg = gpu_node_config(argc, argv);
  auto net = make_pileup_cnn();
  net->to(cfg.device);
  train(net, cfg);
  std::cout << "##fileformat=VCFv4.2\n#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\tSAMPLE\n";
  call_variants(net, cfg, std::cout);
  explain_site(net, cfg);
  torch::save(net, "pileup_cnn.pt");
  return 0;
}
