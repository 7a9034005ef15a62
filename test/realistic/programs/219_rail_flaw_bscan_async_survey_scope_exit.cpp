// Ultrasonic rail inspection: a test train drags three probes (0, 37 and 70
// degrees) along the rail and records B-scans (depth x travel). A small CNN
// classifies each 64x96 B-scan as clean rail, head check, squat or bolt-hole
// crack. Training runs one "track day" of recorded scans at a time and
// reports the loss per probe. After training, the survey of a line scores
// its track segments concurrently, one std::async task per segment, and a
// final heat map of the whole line goes through a generic retry wrapper.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <array>
#include <cstdint>
#include <functional>
#include <future>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kDepth = 64, kTravel = 96, kClasses = 4, kBatch = 32;
const std::array<std::string, 3> kProbes = {"0deg", "37deg", "70deg"};

struct FlawNetImpl : torch::nn::Module {
  FlawNetImpl()
      : features(register_module(
            "features",
            torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5).padding(2)),
                                  torch::nn::BatchNorm2d(16), torch::nn::ReLU(), torch::nn::MaxPool2d(2),
                                  torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)),
                                  torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                                  torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions({4, 4}))))),
        drop(register_module("drop", torch::nn::Dropout(0.4))),
        fc(register_module("fc", torch::nn::Linear(32 * 16, kClasses))) {}

  // scans [B, 1, kDepth, kTravel] -> logits [B, kClasses]
  torch::Tensor forward(const torch::Tensor &scans) {
    return fc->forward(drop->forward(features->forward(scans).flatten(1)));
  }

  torch::nn::Sequential features;
  torch::nn::Dropout drop;
  torch::nn::Linear fc;
};
TORCH_MODULE(FlawNet);

// Runs a callable when the scope ends, however it ends.
class ScopeExit {
 public:
  explicit ScopeExit(std::function<void()> fn) : fn_(std::move(fn)) {}
  ~ScopeExit() { fn_(); }
  ScopeExit(const ScopeExit &) = delete;
  ScopeExit &operator=(const ScopeExit &) = delete;

 private:
  std::function<void()> fn_;
};

// Stand-in for the recorder: echoes of random depth, flaws as bright streaks.
std::pair<torch::Tensor, torch::Tensor> recorded_scans(std::mt19937 &rng, int64_t n) {
  auto labels = torch::randint(0, kClasses, {n}, torch::kLong);
  auto scans = 0.1 * torch::randn({n, 1, kDepth, kTravel});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t kind = labels[i].item<int64_t>();
    if (kind == 0)
      continue;
    const int64_t depth = static_cast<int64_t>(rng() % (kDepth - 16)) + kind * 3;
    scans[i][0].slice(0, depth, depth + 4).slice(1, 20 * kind, 20 * kind + 30) += 0.8;
  }
  return {scans, labels};
}

void train_track_days(FlawNet &net, torch::Device device, int64_t days, int64_t steps_per_day) {
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9).weight_decay(1e-4));
  std::mt19937 rng(219);
  std::map<std::string, torch::Tensor> probe_loss;
  std::map<std::string, int64_t> probe_batches;
  for (const auto &probe : kProbes)
    probe_loss[probe] = torch::zeros({}, torch::TensorOptions().device(device));
  auto smoothed = torch::zeros({}, torch::TensorOptions().device(device));
  net->train();
  for (int64_t day = 0; day < days; ++day) {
    // The recorder's video encoder shares the card: hand it the cache back
    // at the end of each day, however the day ends.
    ScopeExit release_cache([] {
      if (torch::cuda::is_available())
        // BUG(torch-empty-cache-in-loop): the guard is destroyed at the end
        // of every iteration of the day loop; the next day reallocates it all.
        c10::cuda::CUDACachingAllocator::emptyCache();
    });
    for (int64_t s = 0; s < steps_per_day; ++s) {
      const std::string &probe = kProbes[static_cast<size_t>(s) % kProbes.size()];
      auto [scans, labels] = recorded_scans(rng, kBatch);
      opt.zero_grad();
      auto loss = F::cross_entropy(net->forward(scans.to(device)), labels.to(device));
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): the per-probe sum is a map entry
      // that lives across all days, and the loss is added with its graph.
      probe_loss[probe] += loss;
      probe_batches[probe] += 1;
      // OK(torch-loss-accumulation-graph): detached before it is kept.
      smoothed = 0.98 * smoothed + 0.02 * loss.detach();
      if (s % 100 == 0)
        // OK(torch-host-sync-in-loop): one step in 100.
        std::cout << "day " << day << " step " << s << " smoothed loss " << smoothed.item<double>() << '\n';
    }
  }
  for (const auto &probe : kProbes)
    std::cout << probe << ": mean loss "
              << probe_loss[probe].item<double>() / static_cast<double>(std::max<int64_t>(probe_batches[probe], 1))
              << '\n';
}

struct SegmentReport {
  int64_t segment = 0;
  int64_t suspects = 0;
};

SegmentReport score_segment(FlawNet &net, const std::vector<torch::Tensor> &scans, int64_t segment,
                            torch::Device device) {
  SegmentReport report{segment, 0};
  for (const auto &scan : scans) {
    // BUG(torch-inference-without-no-grad): this runs on a std::async
    // thread; survey_line()'s NoGradGuard is thread-local and does not reach
    // it, so autograd records every scan's activations.
    auto logits = net->forward(scan.to(device));
    report.suspects += logits.argmax(1).ne(0).sum().item<int64_t>();
  }
  return report;
}

std::vector<SegmentReport> survey_line(FlawNet &net, const std::vector<std::vector<torch::Tensor>> &segments,
                                       torch::Device device) {
  torch::NoGradGuard no_grad;
  net->eval();
  std::vector<std::future<SegmentReport>> jobs;
  for (size_t i = 0; i < segments.size(); ++i)
    jobs.push_back(std::async(std::launch::async, [&net, &segments, i, device] {
      return score_segment(net, segments[i], static_cast<int64_t>(i), device);
    }));
  std::vector<SegmentReport> reports;
  for (auto &job : jobs)
    reports.push_back(job.get());
  return reports;
}

// Re-scores the suspect segments with the guard where the work runs.
int64_t confirm_suspects(FlawNet &net, const std::vector<std::vector<torch::Tensor>> &suspects, torch::Device device) {
  net->eval();
  std::vector<std::future<int64_t>> jobs;
  for (const auto &segment : suspects)
    jobs.push_back(std::async(std::launch::async, [&net, &segment, device] {
      c10::InferenceMode guard;
      int64_t confirmed = 0;
      for (const auto &scan : segment) {
        // OK(torch-inference-without-no-grad): the task holds its own guard.
        auto probs = torch::softmax(net->forward(scan.to(device)), 1);
        confirmed += probs.select(1, 0).lt(0.2).sum().item<int64_t>();
      }
      return confirmed;
    }));
  int64_t total = 0;
  for (auto &job : jobs)
    total += job.get();
  return total;
}

template <typename Work>
auto with_oom_retry(Work &&work) -> decltype(work()) {
  try {
    return work();
  } catch (const c10::OutOfMemoryError &) {
    std::cerr << "out of memory, emptying the cache and trying again\n";
    // BUG(torch-empty-cache-oom-retry): the same work at the same size runs
    // again; the allocator had already emptied its cache before raising.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return work();
  }
}

int main() {
  torch::manual_seed(219);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  FlawNet net;
  net->to(device);
  train_track_days(net, device, 5, 400);

  std::mt19937 rng(4);
  std::vector<std::vector<torch::Tensor>> segments(6);
  for (auto &segment : segments)
    for (int i = 0; i < 8; ++i)
      segment.push_back(recorded_scans(rng, kBatch).first);
  std::vector<std::vector<torch::Tensor>> suspects;
  for (const auto &report : survey_line(net, segments, device)) {
    std::cout << "segment " << report.segment << ": " << report.suspects << " suspect scans\n";
    if (report.suspects > 0)
      suspects.push_back(segments[static_cast<size_t>(report.segment)]);
  }
  std::cout << "confirmed flaws: " << confirm_suspects(net, suspects, device) << '\n';

  // The whole line in one batch for the heat map of the maintenance report.
  auto line = recorded_scans(rng, 6 * 8 * kBatch).first.to(device);
  auto heat = with_oom_retry([&net, &line] {
    torch::NoGradGuard no_grad;
    net->eval();
    return torch::softmax(net->forward(line), 1).select(1, 0).cpu();
  });
  std::cout << "line heat map: mean clean probability " << heat.mean().item<double>() << '\n';
  return 0;
}
