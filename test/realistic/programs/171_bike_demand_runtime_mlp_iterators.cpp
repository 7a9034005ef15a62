// Hourly bike-share demand per station: an MLP whose layer stack is read at
// run time from a spec string ("128-relu-dropout-64-relu") and built into a
// torch::nn::Sequential. Device and upload settings live in a namespace-scope
// config that main() fills once, uploads go through a TO_DEVICE macro, the
// data set is a torch::data Dataset walked with explicit loader iterators, and
// the epoch-end callbacks (checkpointing, allocator trimming) are a vector of
// std::function. Validation throws when the model diverges.
#include <torch/torch.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace runcfg {
torch::Device device(torch::kCPU);
int64_t batch_size = 128;
std::string layer_spec = "128-relu-dropout-64-relu";
}  // namespace runcfg

#define TO_DEVICE(t) (t).to(runcfg::device, /*non_blocking=*/true)

constexpr int64_t kFeatures = 16;

// Calendar and weather features -> rentals in the next hour (log1p scale).
class DemandDataset : public torch::data::datasets::Dataset<DemandDataset> {
 public:
  explicit DemandDataset(int64_t hours) {
    auto hour = torch::arange(hours, torch::kFloat).remainder(24.0);
    auto temp = 12.0 + 8.0 * torch::randn({hours});
    features_ = torch::cat({torch::sin(hour * 0.2618).unsqueeze(1), torch::cos(hour * 0.2618).unsqueeze(1),
                            temp.unsqueeze(1) / 20.0, torch::randn({hours, kFeatures - 3})},
                           1);
    targets_ = torch::log1p(torch::relu(30.0 + 20.0 * torch::sin(hour * 0.2618) + temp + 5.0 * torch::randn({hours})))
                   .unsqueeze(1);
    // BUG(torch-tensor-to-discarded): pin_memory() returns a pinned copy;
    // the features stay in pageable memory.
    features_.pin_memory();
  }

  torch::data::Example<> get(size_t i) override {
    return {features_[static_cast<int64_t>(i)], targets_[static_cast<int64_t>(i)]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(features_.size(0)); }

  const torch::Tensor &features() const { return features_; }
  const torch::Tensor &targets() const { return targets_; }

 private:
  torch::Tensor features_, targets_;
};

torch::nn::Sequential build_mlp(const std::string &spec, int64_t in, int64_t out) {
  torch::nn::Sequential net;
  std::istringstream tokens(spec);
  std::string tok;
  int64_t width = in;
  while (std::getline(tokens, tok, '-')) {
    if (tok == "relu")
      net->push_back(torch::nn::ReLU());
    else if (tok == "dropout")
      net->push_back(torch::nn::Dropout(0.2));
    else {
      const int64_t next = std::stoll(tok);
      net->push_back(torch::nn::Linear(width, next));
      width = next;
    }
  }
  net->push_back(torch::nn::Linear(width, out));
  return net;
}

double validate(torch::nn::Sequential &net, const DemandDataset &val) {
  torch::NoGradGuard no_grad;
  net->eval();
  // OK(torch-device-mismatch): features and targets both go to the config's device.
  auto pred = net->forward(val.features().to(runcfg::device));
  const double rmse = torch::sqrt(torch::mse_loss(pred, val.targets().to(runcfg::device))).item<double>();
  if (!std::isfinite(rmse))
    throw std::runtime_error("validation RMSE is not finite");
  return rmse;
}

// Next-hour forecast for the rebalancing trucks, written as CSV.
void export_forecast(torch::nn::Sequential &net, const DemandDataset &val, std::ostream &csv) {
  torch::NoGradGuard no_grad;
  net->eval();
  auto pred = net->forward(val.features().narrow(0, 0, 24).to(runcfg::device));
  auto host = torch::expm1(pred).squeeze(1).to(torch::kCPU, /*non_blocking=*/true);
  if (runcfg::device.is_cuda())
    torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised right above.
  auto rentals = host.accessor<float, 1>();
  for (int64_t h = 0; h < rentals.size(0); ++h)
    csv << h << "," << rentals[h] << "\n";
}

// What-if for the operations team: demand in each hour of the first day if
// it were 5 degrees warmer. The model comes in as a prediction callable.
std::vector<double> heatwave_scenario(const std::function<torch::Tensor(const torch::Tensor &)> &predict,
                                      const DemandDataset &val) {
  std::vector<double> rentals;
  for (int64_t h = 0; h < 24; ++h) {
    auto row = val.features()[h].clone().unsqueeze(0);
    row[0][2] += 0.25;
    rentals.push_back(torch::expm1(predict(row.to(runcfg::device))).item<double>());
  }
  return rentals;
}

int main() {
  torch::manual_seed(171);
  runcfg::device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);

  auto train_set = DemandDataset(24 * 365);
  DemandDataset val_set(24 * 60);
  auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
      train_set.map(torch::data::transforms::Stack<>()), torch::data::DataLoaderOptions().batch_size(runcfg::batch_size));

  auto net = build_mlp(runcfg::layer_spec, kFeatures, 1);
  net->to(runcfg::device);
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-3));

  std::vector<std::function<void(int)>> on_epoch_end;
  on_epoch_end.push_back([&](int epoch) {
    if (epoch % 5 == 4)
      torch::save(net, "bike_mlp_epoch" + std::to_string(epoch) + ".pt");
  });
  on_epoch_end.push_back([](int) {
    if (runcfg::device.is_cuda())
      // BUG(torch-empty-cache-in-loop): the epoch loop runs every callback at
      // the end of every epoch; the next epoch cudaMallocs it all again.
      c10::cuda::CUDACachingAllocator::emptyCache();
  });

  double best = 1e9;
  for (int epoch = 0; epoch < 30; ++epoch) {
    net->train();
    auto epoch_loss = torch::zeros({}, runcfg::device);
    int64_t batches = 0;
    for (auto it = loader->begin(); it != loader->end(); ++it) {
      auto &batch = *it;
      // BUG(torch-non-blocking-pageable): the loader's stacked batch is
      // pageable memory; the macro's non_blocking copy runs synchronously.
      auto x = TO_DEVICE(batch.data);
      // OK(torch-device-mismatch): the target is moved too (blocking).
      auto y = batch.target.to(runcfg::device);
      opt.zero_grad();
      auto loss = torch::mse_loss(net->forward(x), y);
      loss.backward();
      opt.step();
      // BUG(torch-loss-accumulation-graph): the epoch sum keeps every
      // batch's graph alive until the epoch ends.
      epoch_loss = epoch_loss + loss;
      ++batches;
    }
    double rmse = 0.0;
    try {
      rmse = validate(net, val_set);
    } catch (const std::runtime_error &e) {
      std::cerr << "epoch " << epoch << ": " << e.what() << ", stopping\n";
      break;
    }
    best = std::min(best, rmse);
    std::cout << "epoch " << epoch << " train mse " << epoch_loss.item<double>() / static_cast<double>(batches)
              << " val rmse " << rmse << "\n";
    for (auto &callback : on_epoch_end)
      callback(epoch);
  }

  net->eval();
  auto scenario = heatwave_scenario(
      [&](const torch::Tensor &x) {
        // BUG(torch-inference-without-no-grad): heatwave_scenario() calls this
        // for each of 24 hours and nothing disables autograd.
        return net->forward(x);
      },
      val_set);
  std::cout << "heatwave noon demand " << scenario[12] << "\n";

  std::ostringstream csv;
  export_forecast(net, val_set, csv);
  std::cout << "best val rmse " << best << "\n" << csv.str();
  return 0;
}
