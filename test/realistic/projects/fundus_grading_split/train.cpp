// The four training phases, the epoch loop with validation, and main().
#include "amp.h"
#include "fundus.h"

#include <exception>
#include <iostream>
#include <string>

namespace {

// Phase 1: fit the grading head on the frozen (pretrained) backbone first,
// so that fine-tuning does not start from a random head.
void warm_up_head(GraderNet &net, const RunConfig &cfg, torch::Device device) {
  set_backbone_trainable(net, false);
  torch::optim::SGD probe(net->head->parameters(), torch::optim::SGDOptions(cfg.probe_lr).momentum(0.9));
  LossMeter meter;
  if (cfg.amp)
    amp::enable(true);
  for (int64_t step = 0; step < cfg.probe_steps; ++step) {
    auto batch = synth_fundus(cfg.batch, kTrainSeed + static_cast<uint64_t>(step), device);
    auto loss = probe_step(net, probe, batch);
    meter.update(loss, cfg.batch);
    if (step % 100 == 99) {
      // OK(torch-host-sync-in-loop): one step in 100.
      std::cout << "probe step " << step + 1 << " mean loss " << meter.mean() << '\n';
    }
  }
  if (cfg.amp)
    amp::enable(false);
  set_backbone_trainable(net, true);
}

// Phase 2: one epoch of fine-tuning, cfg.accum micro-batches per update.
double finetune_epoch(GraderNet &net, torch::optim::AdamW &opt, const RunConfig &cfg, int64_t epoch,
                      torch::Device device) {
  std::vector<torch::Tensor> micro_losses;
  LossMeter meter;
  for (int64_t micro = 1; micro <= cfg.micro_batches; ++micro) {
    auto seed = kTrainSeed + static_cast<uint64_t>(100000 * (epoch + 1) + micro);
    auto batch = synth_fundus(cfg.batch, seed, device);
    auto loss = grader_micro_step(net, batch, cfg.accum);
    // BUG(torch-loss-accumulation-graph): grader_micro_step() (step.cpp)
    // returns the loss with its graph; the vector keeps every micro-batch's
    // graph until the end of the epoch.
    micro_losses.push_back(loss);
    // OK(torch-loss-accumulation-graph): detached before the meter keeps it.
    meter.update(loss.detach(), cfg.batch);
    if (micro % cfg.accum == 0) {
      // OK(torch-missing-zero-grad): step and reset under the same condition.
      opt.step();
      opt.zero_grad();
    }
  }
  const double spread = torch::stack(micro_losses).std().item<double>();
  std::cout << "epoch " << epoch << " train loss " << meter.mean() << " (micro-batch spread " << spread << ")\n";
  return meter.mean();
}

void fit(GraderNet &net, const RunConfig &cfg, torch::Device device) {
  warm_up_head(net, cfg, device);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(1e-4));
  opt.zero_grad();  // the probe's last gradients
  double best_kappa = -1.0;
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    finetune_epoch(net, opt, cfg, epoch, device);
    const EvalReport report = evaluate(net, cfg, device);
    std::cout << "epoch " << epoch << " val loss " << report.loss << " kappa " << report.kappa << '\n';
    if (report.kappa > best_kappa) {
      best_kappa = report.kappa;
      torch::save(net, cfg.checkpoint);
    }
  }
}

// Phase 3: the quality gate, on its own.
void train_quality_gate(QualityNet &gate, const RunConfig &cfg, torch::Device device) {
  torch::optim::Adam opt(gate->parameters(), torch::optim::AdamOptions(1e-3));
  auto running = torch::zeros({}, torch::TensorOptions().device(device));
  for (int64_t step = 0; step < cfg.gate_steps; ++step) {
    auto batch = synth_fundus(cfg.batch, kGateSeed + static_cast<uint64_t>(step), device);
    auto loss = quality_step(gate, opt, batch);
    // OK(torch-loss-accumulation-graph): quality_step() (step.cpp) returns
    // the loss detached.
    running += loss;
    if (step % 100 == 99) {
      std::cout << "gate step " << step + 1 << " loss " << running.item<double>() / 100.0 << '\n';
      running.zero_();
    }
  }
}

// Phase 4: a new clinic's camera renders red stronger; its photographs come
// in small batches, accumulated up to the usual batch size.
void adapt_to_site(GraderNet &net, const RunConfig &cfg, torch::Device device) {
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(0.1 * cfg.lr).weight_decay(1e-4));
  opt.zero_grad();
  const int64_t small = cfg.batch / cfg.site_accum;
  for (int64_t micro = 1; micro <= cfg.site_micro_batches; ++micro) {
    auto batch = synth_fundus(small, kSiteSeed + static_cast<uint64_t>(micro), device, /*red_gain=*/1.3);
    site_step(net, batch);
    step_when_ready(opt, micro, cfg.site_accum);
  }
}

}  // namespace

int main(int argc, char **argv) {
  RunConfig cfg;
  if (argc > 1)
    cfg.epochs = std::stoll(argv[1]);
  torch::manual_seed(17);
  // OK(torch-cuda-unguarded): a CPU fallback on the other side.
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  cfg.amp = device.is_cuda();

  GraderNet net(cfg.width);
  net->to(device);
  QualityNet gate;
  gate->to(device);
  fit(net, cfg, device);
  train_quality_gate(gate, cfg, device);
  adapt_to_site(net, cfg, device);

  freeze_for_screening(net, gate);
  for (uint64_t clinic = 0; clinic < 3; ++clinic) {
    auto visit = synth_fundus(16, kClinicSeed + clinic, device, clinic == 2 ? 1.3 : 1.0);
    try {
      int64_t referred = 0, recalled = 0;
      for (const Referral &r : screen_batch(net, gate, visit.images)) {
        recalled += r.gradable ? 0 : 1;
        referred += r.gradable && r.p_referable > 0.5 ? 1 : 0;
      }
      std::cout << "clinic " << clinic << ": " << referred << " referred, " << recalled << " recalled\n";
    } catch (const std::exception &e) {
      std::cerr << "clinic " << clinic << " skipped: " << e.what() << '\n';
    }
  }
  std::cout << "gate pass rate " << quality_pass_rate(gate, synth_fundus(64, kClinicSeed + 99, device).images) << '\n';
  torch::save(net, "dr_grader_site.pt");
  return 0;
}
