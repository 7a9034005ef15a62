// Grid-frequency forecasting for a transmission system operator: phasor
// measurement units (PMUs) report the frequency deviation from 50 Hz (mHz)
// and the rate of change of frequency at 10 Hz, and a GRU forecaster
// predicts the next 6 s of deviation from the last 30 s, so that fast
// frequency response can be armed before the nadir. Training windows come
// from a hand-written iterator over one recording (operator* builds a Batch,
// with an optional mask where a PMU dropped out); the device is a process-
// wide Runtime singleton; the evaluation scores each balancing area and
// reads its forecasts back through two host slots.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

constexpr int64_t kHist = 300, kHorizon = 60, kFeat = 2, kBatch = 64, kHidden = 96, kStride = 17;

class Runtime {
 public:
  static Runtime &instance() {
    static Runtime rt;
    return rt;
  }
  torch::Device device() const { return device_; }
  bool cuda() const { return device_.is_cuda(); }

 private:
  Runtime() : device_(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU) {}
  torch::Device device_;
};

struct FreqForecasterImpl : torch::nn::Module {
  FreqForecasterImpl()
      : gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(kFeat, kHidden).num_layers(2).batch_first(true)))),
        drop(register_module("drop", torch::nn::Dropout(0.2))),
        head(register_module("head", torch::nn::Linear(kHidden, kHorizon))) {}

  // x [B, kHist, kFeat] -> deviation forecast [B, kHorizon] in mHz
  torch::Tensor forward(const torch::Tensor &x) {
    auto out = std::get<0>(gru->forward(x));
    return head->forward(drop->forward(out.select(1, -1)));
  }

  torch::nn::GRU gru;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
};
TORCH_MODULE(FreqForecaster);

struct Batch {
  torch::Tensor history;               // [B, kHist, kFeat]
  torch::Tensor target;                // [B, kHorizon]
  std::optional<torch::Tensor> valid;  // [B, kHorizon], 0 where a PMU was out
};

// One recording at 10 Hz; `gaps` are sample ranges where the PMU was silent.
class Recording {
 public:
  Recording(int64_t samples, std::vector<std::pair<int64_t, int64_t>> gaps)
      : series_(torch::zeros({samples, kFeat})), gaps_(std::move(gaps)) {
    auto t = torch::arange(samples, torch::kFloat) / 10.0;
    auto dev = 20.0 * torch::sin(t / 45.0) + 5.0 * torch::randn({samples});
    series_.select(1, 0).copy_(dev);
    series_.select(1, 1).slice(0, 1).copy_((dev.slice(0, 1) - dev.slice(0, 0, -1)) * 10.0);
  }

  class WindowIterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch *;
    using reference = Batch;

    WindowIterator(const Recording &rec, int64_t pos) : rec_(rec), pos_(pos) {}

    Batch operator*() const {
      Batch b;
      b.history = torch::empty({kBatch, kHist, kFeat});
      b.target = torch::empty({kBatch, kHorizon});
      auto valid = torch::ones({kBatch, kHorizon});
      bool any_gap = false;
      for (int64_t i = 0; i < kBatch; ++i) {
        const int64_t start = pos_ + i * kStride;
        b.history[i].copy_(rec_.series_.slice(0, start, start + kHist));
        b.target[i].copy_(rec_.series_.slice(0, start + kHist, start + kHist + kHorizon).select(1, 0));
        for (const auto &[from, to] : rec_.gaps_) {
          const int64_t lo = std::max(from, start + kHist), hi = std::min(to, start + kHist + kHorizon);
          if (lo < hi) {
            valid[i].slice(0, lo - start - kHist, hi - start - kHist).zero_();
            any_gap = true;
          }
        }
      }
      if (any_gap)
        b.valid = valid;
      return b;
    }
    WindowIterator &operator++() {
      pos_ += kBatch * kStride;
      return *this;
    }
    bool operator!=(const WindowIterator &other) const { return pos_ < other.pos_; }

   private:
    const Recording &rec_;
    int64_t pos_;
  };

  WindowIterator begin() const { return WindowIterator(*this, 0); }
  WindowIterator end() const { return WindowIterator(*this, series_.size(0) - kBatch * kStride - kHist - kHorizon); }

 private:
  torch::Tensor series_;
  std::vector<std::pair<int64_t, int64_t>> gaps_;
};

void train(FreqForecaster &net, const Recording &rec, int epochs) {
  const torch::Device dev = Runtime::instance().device();
  net->train();
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(1e-4));
  std::vector<double> recent;
  int64_t step = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (auto it = rec.begin(); it != rec.end(); ++it) {
      Batch b = *it;
      // BUG(torch-non-blocking-pageable): operator* builds the history with
      // plain torch::empty, so this "async" upload blocks the host.
      auto x = b.history.to(dev, /*non_blocking=*/true);
      auto y = b.target.to(dev);
      auto pred = net->forward(x);
      torch::Tensor loss;
      if (b.valid) {
        // BUG(torch-tensor-to-discarded): the moved mask is thrown away; the
        // optional still holds the CPU tensor.
        b.valid->to(dev);
        // BUG(torch-device-mismatch): the mask is still on the CPU while the
        // forecast is on the runtime's device.
        auto masked = (pred - y) * b.valid.value();
        loss = masked.pow(2).sum() / b.valid->sum().clamp_min(1.0);
      } else {
        loss = torch::mse_loss(pred, y);
      }
      opt.zero_grad();
      loss.backward();
      torch::nn::utils::clip_grad_norm_(net->parameters(), 1.0);
      opt.step();

      // BUG(torch-host-sync-in-loop): the running window of losses reads the
      // loss back to the host on every step.
      recent.push_back(loss.item<double>());
      if (recent.size() > 100)
        recent.erase(recent.begin());
      if (++step % 200 == 0) {
        double sum = 0;
        for (double v : recent)
          sum += v;
        std::cout << "epoch " << epoch << " step " << step << " loss(100) " << sum / recent.size() << "\n";
      }
    }
  }
}

void release_area_buffers() {
  if (Runtime::instance().cuda())
    // BUG(torch-empty-cache-in-loop): called once per balancing area by
    // evaluate_areas(); each call syncs and hands the blocks back.
    c10::cuda::CUDACachingAllocator::emptyCache();
}

void write_area_report(const std::string &area, const torch::Tensor &forecast) {
  auto a = forecast.accessor<float, 2>();
  double worst = 0;
  for (int64_t i = 0; i < a.size(0); ++i)
    for (int64_t h = 0; h < a.size(1); ++h)
      worst = std::min(worst, static_cast<double>(a[i][h]));
  std::cout << area << ": deepest forecast nadir " << worst << " mHz\n";
}

void evaluate_areas(FreqForecaster &net, const std::vector<std::pair<std::string, Recording>> &areas) {
  const torch::Device dev = Runtime::instance().device();
  torch::NoGradGuard no_grad;
  net->eval();
  std::array<torch::Tensor, 2> host_slots;
  for (size_t a = 0; a < areas.size(); ++a) {
    Batch b = *areas[a].second.begin();
    torch::Tensor x;
    if (Runtime::instance().cuda()) {
      // OK(torch-non-blocking-pageable): pinned before the async copy.
      x = b.history.pin_memory().to(dev, /*non_blocking=*/true);
    } else {
      x = b.history;
    }
    auto pred = net->forward(x);
    host_slots[a % 2] = pred.to(torch::kCPU, /*non_blocking=*/true);
    if (a > 0) {
      if (Runtime::instance().cuda())
        c10::cuda::getCurrentCUDAStream().synchronize();
      // OK(torch-non-blocking-d2h-race): the previous area's copy was
      // waited for by the stream synchronisation above.
      write_area_report(areas[a - 1].first, host_slots[(a - 1) % 2]);
    }
    release_area_buffers();
  }
  if (!areas.empty()) {
    if (Runtime::instance().cuda())
      c10::cuda::getCurrentCUDAStream().synchronize();
    write_area_report(areas.back().first, host_slots[(areas.size() - 1) % 2]);
  }
}

int main() {
  torch::manual_seed(224);
  FreqForecaster net;
  net->to(Runtime::instance().device());
  Recording history(200000, {{15000, 15400}, {120000, 121200}});
  train(net, history, 4);

  std::vector<std::pair<std::string, Recording>> areas;
  areas.emplace_back("north", Recording(30000, {}));
  areas.emplace_back("central", Recording(30000, {{9000, 9300}}));
  areas.emplace_back("south", Recording(30000, {}));
  evaluate_areas(net, areas);

  // Live nowcast for the control room from the latest 30 s.
  torch::NoGradGuard no_grad;
  net->eval();
  Recording live(kBatch * kStride + kHist + kHorizon + 1, {});
  Batch latest = *live.begin();
  auto forecast = net->forward(latest.history.to(Runtime::instance().device()));
  auto host = forecast.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): the forecasts are read before the
  // queued device-to-host copy is known to have finished.
  auto rows = host.accessor<float, 2>();
  double nadir = 0;
  for (int64_t h = 0; h < rows.size(1); ++h)
    nadir = std::min(nadir, static_cast<double>(rows[0][h]));
  std::cout << "live nadir forecast " << nadir << " mHz\n";
  return 0;
}
