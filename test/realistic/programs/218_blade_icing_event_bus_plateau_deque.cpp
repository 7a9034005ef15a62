// Blade-icing forecaster for a cold-climate wind farm: a GRU reads the last
// eight hours of a turbine's SCADA channels (wind speed, rotor speed, pitch,
// nacelle temperature, power-curve deviation, relative humidity) at
// ten-minute resolution and predicts whether ice will build up on the blades
// in the next six hours, so that the heating system starts in time. The
// trainer reports each step through a metrics struct, watches for a loss
// plateau over a window of recent losses, and fires named events (epoch end,
// checkpoint) to handlers the run registers. After training, the dispatcher
// dashboard scores every turbine of the farm in one batch.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace F = torch::nn::functional;

constexpr int64_t kChannels = 6, kWindow = 48, kHidden = 64, kBatch = 128, kTurbines = 412;

struct IcingNetImpl : torch::nn::Module {
  IcingNetImpl()
      : gru(register_module("gru", torch::nn::GRU(torch::nn::GRUOptions(kChannels, kHidden).batch_first(true)))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        head(register_module("head", torch::nn::Linear(kHidden, 1))) {}

  // windows [B, kWindow, kChannels] -> icing logit [B]
  torch::Tensor forward(const torch::Tensor &windows) {
    auto last = std::get<0>(gru->forward(windows)).select(1, kWindow - 1);
    return head->forward(drop->forward(last)).squeeze(1);
  }

  torch::nn::GRU gru;
  torch::nn::Dropout drop;
  torch::nn::Linear head;
};
TORCH_MODULE(IcingNet);

struct ScadaBatch {
  torch::Tensor windows, iced;
};

// Stand-in for the SCADA historian: icing follows cold, humid, low-power
// windows.
ScadaBatch historian_batch(std::mt19937 &rng, int64_t n, torch::Device device) {
  auto windows = torch::randn({n, kWindow, kChannels});
  auto cold_humid = windows.select(2, 3).mean(1).lt(-0.2).logical_and(windows.select(2, 5).mean(1).gt(0.1));
  auto iced = cold_humid.to(torch::kFloat);
  if (rng() % 7 == 0)
    iced = 1.0 - iced;  // a mislabelled maintenance log now and then
  return {windows.to(device), iced.to(device)};
}

struct StepMetrics {
  torch::Tensor loss;
  int64_t samples = 0;
};

StepMetrics train_step(IcingNet &net, torch::optim::Optimizer &opt, const ScadaBatch &b) {
  opt.zero_grad();
  auto loss = F::binary_cross_entropy_with_logits(net->forward(b.windows), b.iced);
  loss.backward();
  torch::nn::utils::clip_grad_norm_(net->parameters(), 1.0);
  opt.step();
  return {loss, b.windows.size(0)};
}

// Lowers the learning rate when the mean of the last `span` losses stops
// improving on the mean of the `span` before.
class PlateauWatch {
 public:
  explicit PlateauWatch(size_t span) : span_(span) {}

  void observe(const torch::Tensor &loss) {
    // BUG(torch-loss-accumulation-graph): the window keeps the training
    // losses as they are, each with its step's graph; .detach() is missing.
    history_.push_back(loss);
    if (history_.size() > 2 * span_)
      history_.pop_front();
  }

  bool stalled() const {
    if (history_.size() < 2 * span_)
      return false;
    auto all = torch::stack(std::vector<torch::Tensor>(history_.begin(), history_.end()));
    auto older = all.slice(0, 0, static_cast<int64_t>(span_)).mean();
    auto recent = all.slice(0, static_cast<int64_t>(span_)).mean();
    return recent.item<double>() > 0.995 * older.item<double>();
  }

 private:
  size_t span_;
  std::deque<torch::Tensor> history_;
};

enum class Event { EpochEnd, Checkpoint };

class EventBus {
 public:
  void on(Event e, std::function<void(int64_t)> handler) { handlers_[e].push_back(std::move(handler)); }
  void emit(Event e, int64_t epoch) {
    for (auto &handler : handlers_[e])
      handler(epoch);
  }

 private:
  std::map<Event, std::vector<std::function<void(int64_t)>>> handlers_;
};

double train(IcingNet &net, torch::Device device, int64_t epochs, int64_t steps, EventBus &bus) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(2e-3));
  PlateauWatch plateau(50);
  std::mt19937 rng(218);
  double last_epoch_loss = 0.0;
  net->train();
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    StepMetrics totals{torch::zeros({}, device), 0};
    for (int64_t s = 0; s < steps; ++s) {
      StepMetrics m = train_step(net, opt, historian_batch(rng, kBatch, device));
      // BUG(torch-loss-accumulation-graph): the step's loss comes back in
      // the struct with its graph; the epoch total keeps every step's alive.
      totals.loss += m.loss;
      // OK(torch-loss-accumulation-graph): a sample count.
      totals.samples += m.samples;
      plateau.observe(m.loss);
    }
    if (plateau.stalled()) {
      for (auto &group : opt.param_groups())
        static_cast<torch::optim::AdamOptions &>(group.options()).lr(
            static_cast<torch::optim::AdamOptions &>(group.options()).lr() * 0.5);
      std::cout << "plateau: halving the learning rate\n";
    }
    last_epoch_loss = totals.loss.item<double>() / static_cast<double>(steps);
    std::cout << "epoch " << epoch << " loss " << last_epoch_loss << " over " << totals.samples << " windows\n";
    bus.emit(Event::EpochEnd, epoch);
  }
  bus.emit(Event::Checkpoint, epochs);
  return last_epoch_loss;
}

double validate(IcingNet &net, torch::Device device, int64_t batches) {
  net->eval();
  std::mt19937 rng(9001);
  double loss_sum = 0.0;
  for (int64_t b = 0; b < batches; ++b) {
    ScadaBatch v = historian_batch(rng, kBatch, device);
    // BUG(torch-inference-without-no-grad): a validation loop without a
    // guard: autograd records the GRU's activations of every batch.
    auto logits = net->forward(v.windows);
    // OK(torch-loss-accumulation-graph): item() leaves the graph behind.
    loss_sum += F::binary_cross_entropy_with_logits(logits, v.iced).item<double>();
  }
  return loss_sum / static_cast<double>(batches);
}

// The dashboard scores all turbines at once; nullopt when the card ran out
// of memory.
std::optional<torch::Tensor> try_score_farm(IcingNet &net, const torch::Tensor &windows) {
  try {
    torch::NoGradGuard no_grad;
    return torch::sigmoid(net->forward(windows));
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): publish_dashboard() calls this again
    // with the same windows; the allocator already emptied its cache before
    // raising, so the second try needs the same memory.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return std::nullopt;
  }
}

void publish_dashboard(IcingNet &net, torch::Device device) {
  net->eval();
  std::mt19937 rng(77);
  auto farm = historian_batch(rng, kTurbines, device).windows;
  auto risk = try_score_farm(net, farm);
  if (!risk)
    risk = try_score_farm(net, farm);
  if (!risk) {
    std::cerr << "dashboard: scoring failed twice\n";
    return;
  }
  auto at_risk = risk->gt(0.5).sum().item<int64_t>();
  std::cout << "dashboard: " << at_risk << " of " << kTurbines << " turbines need blade heating\n";
}

int main() {
  torch::manual_seed(218);
  const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
  IcingNet net;
  net->to(device);

  EventBus bus;
  // The historian and the forecaster share the card; the ops team wants the
  // forecaster's cache released at every epoch boundary, with a log line.
  bus.on(Event::EpochEnd, [](int64_t epoch) {
    if (!torch::cuda::is_available())
      return;
    // BUG(torch-empty-cache-in-loop): emit() runs this handler at the end of
    // every epoch of train()'s loop; the next epoch cudaMallocs it all again.
    c10::cuda::CUDACachingAllocator::emptyCache();
    std::cout << "[epoch " << epoch << "] released cached GPU blocks\n";
  });
  bus.on(Event::Checkpoint, [&net](int64_t epoch) {
    torch::save(net, "icing_gru_e" + std::to_string(epoch) + ".pt");
  });

  const double train_loss = train(net, device, 8, 200, bus);
  std::cout << "final train loss " << train_loss << ", validation loss " << validate(net, device, 30) << '\n';
  publish_dashboard(net, device);
  return 0;
}
