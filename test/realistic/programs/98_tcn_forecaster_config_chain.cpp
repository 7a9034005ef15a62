// Multi-horizon load forecasting with a temporal convolution network. All
// run settings, the device included, live in one Config passed by const
// reference to free functions; the training step is split over a short
// helper chain (train_epoch -> train_step -> report -> record). Training
// stops early when the validation loss stops improving.
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

struct Config {
  torch::Device device{torch::kCPU};
  int64_t window = 168, horizon = 24, batch = 64;
  int64_t log_every = 50;
  int patience = 5;
};

Config make_config(int argc, char **argv) {
  Config c;
  if (torch::cuda::is_available() && !(argc > 1 && std::string(argv[1]) == "--cpu"))
    // OK(torch-cuda-unguarded): availability is the first operand of the &&.
    c.device = torch::Device(torch::kCUDA);
  return c;
}

struct TcnImpl : torch::nn::Module {
  TcnImpl(int64_t horizon)
      : c1(register_module("c1", torch::nn::Conv1d(torch::nn::Conv1dOptions(1, 32, 3).dilation(1)))),
        c2(register_module("c2", torch::nn::Conv1d(torch::nn::Conv1dOptions(32, 32, 3).dilation(4)))),
        c3(register_module("c3", torch::nn::Conv1d(torch::nn::Conv1dOptions(32, 32, 3).dilation(16)))),
        head(register_module("head", torch::nn::Linear(32, horizon))) {}
  torch::Tensor forward(const torch::Tensor &x) {  // x: [B, window]
    auto h = torch::relu(c1->forward(x.unsqueeze(1)));
    h = torch::relu(c2->forward(h));
    h = torch::relu(c3->forward(h));
    return head->forward(h.select(2, -1));
  }
  torch::nn::Conv1d c1, c2, c3;
  torch::nn::Linear head;
};
TORCH_MODULE(Tcn);

// A synthetic hourly load curve with daily and weekly seasonality.
std::vector<float> load_series(int64_t hours) {
  std::vector<float> s(hours);
  for (int64_t h = 0; h < hours; ++h)
    s[h] = 1.0f + 0.3f * std::sin(2 * M_PI * h / 24.0) + 0.1f * std::sin(2 * M_PI * h / 168.0);
  return s;
}

std::pair<torch::Tensor, torch::Tensor> windows(const torch::Tensor &series, const Config &cfg, int64_t start) {
  auto idx = torch::arange(cfg.batch).unsqueeze(1) * 7 + start + torch::arange(cfg.window + cfg.horizon).unsqueeze(0);
  auto w = series.index({idx.remainder(series.size(0) - 1)});
  return {w.narrow(1, 0, cfg.window), w.narrow(1, cfg.window, cfg.horizon)};
}

std::vector<double> g_history;

void record(const Config &cfg, const torch::Tensor &loss) {
  (void)cfg;
  // BUG(torch-host-sync-in-loop): record() is reached on every training
  // step (train_epoch -> train_step -> report -> record).
  g_history.push_back(loss.item<double>());
}

void report(const Config &cfg, int64_t step, const torch::Tensor &loss) {
  record(cfg, loss);
  if (step % cfg.log_every == 0)
    std::cout << "  step " << step << " loss " << g_history.back() << "\n";
}

torch::Tensor train_step(Tcn &model, torch::optim::Optimizer &opt, const Config &cfg, const torch::Tensor &x,
                         const torch::Tensor &y, int64_t step) {
  opt.zero_grad();
  auto loss = torch::l1_loss(model->forward(x.to(cfg.device)), y.to(cfg.device));
  loss.backward();
  opt.step();
  report(cfg, step, loss);
  return loss;
}

double train_epoch(Tcn &model, torch::optim::Optimizer &opt, const Config &cfg, const torch::Tensor &series) {
  torch::Tensor epoch_loss = torch::zeros({}, cfg.device);
  for (int64_t step = 0; step < 200; ++step) {
    auto [x, y] = windows(series, cfg, step * cfg.batch);
    auto loss = train_step(model, opt, cfg, x, y, step);
    // BUG(torch-loss-accumulation-graph): the returned loss is still in its
    // graph; the epoch sum chains all 200 of them.
    epoch_loss = epoch_loss + loss;
  }
  return (epoch_loss / 200).item<double>();
}

double validate(Tcn &model, const Config &cfg, const torch::Tensor &series) {
  torch::NoGradGuard no_grad;
  double total = 0;
  for (int64_t b = 0; b < 20; ++b) {
    auto [x, y] = windows(series, cfg, 20000 + b * cfg.batch);
    // OK(torch-inference-without-no-grad, torch-device-mismatch): guarded,
    // and both sides moved.
    total += torch::l1_loss(model->forward(x.to(cfg.device)), y.to(cfg.device)).item<double>();
  }
  return total / 20;
}

torch::Tensor rollout(Tcn &model, const Config &cfg, const std::vector<float> &recent, int64_t steps) {
  torch::NoGradGuard no_grad;
  auto history = torch::tensor(recent);
  std::vector<torch::Tensor> preds;
  for (int64_t k = 0; k < steps; ++k) {
    auto seed = history.narrow(0, history.size(0) - cfg.window, cfg.window).unsqueeze(0);
    auto next = model->forward(seed).squeeze(0);
    preds.push_back(next.cpu());
    history = torch::cat({history, preds.back()});
  }
  return torch::cat(preds);
}

int main(int argc, char **argv) {
  const Config cfg = make_config(argc, argv);
  auto raw = load_series(24 * 7 * 150);
  auto series = torch::tensor(raw);
  Tcn model(cfg.horizon);
  model->to(cfg.device);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));

  double best = INFINITY;
  int bad = 0;
  for (int epoch = 0; epoch < 100; ++epoch) {
    const double tr = train_epoch(model, opt, cfg, series);
    const double va = validate(model, cfg, series);
    std::cout << "epoch " << epoch << " train " << tr << " val " << va << "\n";
    if (va < best - 1e-4) {
      best = va;
      bad = 0;
      torch::save(model, "tcn_best.pt");
    } else if (++bad >= cfg.patience) {
      std::cout << "early stop\n";
      break;
    }
  }

  std::vector<float> recent(raw.end() - cfg.window, raw.end());
  // BUG(torch-device-mismatch): rollout() feeds its host history tensor to
  // the model, which sits on cfg.device.
  auto forecast = rollout(model, cfg, recent, 7);
  std::cout << "next week peak " << forecast.max().item<float>() << "\n";
  return 0;
}
