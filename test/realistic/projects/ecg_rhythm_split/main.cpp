// Application: epoch hooks, training, baseline comparison, Holter strip.
#include "ecg.h"

#include <iomanip>
#include <iostream>

namespace callbacks {

// Agreement of the model with the cardiologists' labels on a fixed set of
// patient-held-out windows, epoch by epoch.
EpochHook drift_monitor(EcgSplit holdout, torch::Device device, std::shared_ptr<std::vector<double>> history) {
  auto x = holdout.signals.to(device);
  return [x, holdout, history](RhythmNetImpl &net, int64_t epoch) {
    torch::NoGradGuard no_grad;
    // BUG(torch-eval-mode-missing): Runner::fit() (runner.cpp) runs its
    // hooks right after validate() switched the model back to train().
    auto pred = net.forward(x).argmax(1);
    // BUG(torch-device-mismatch): x was moved to the device, the captured
    // labels (make_split(), config.cpp) are still on the host.
    auto hits = (pred == holdout.labels).to(torch::kFloat);
    // OK(torch-host-sync-in-loop): hooks run once per epoch.
    const double agree = hits.mean().item<double>();
    if (!history->empty() && agree < history->back() - 0.02)
      std::cout << "  drift: held-out agreement fell to " << agree << " at epoch " << epoch << '\n';
    history->push_back(agree);
  };
}

EpochHook checkpoint_every(int64_t every, std::string stem) {
  return [every, stem](RhythmNetImpl &net, int64_t epoch) {
    if ((epoch + 1) % every != 0)
      return;
    torch::serialize::OutputArchive archive;
    net.save(archive);
    archive.save_to(stem + "_e" + std::to_string(epoch + 1) + ".pt");
  };
}

}  // namespace callbacks

namespace {

const char *const kClassNames[kClasses] = {"N", "S", "V", "F", "Q"};

void print_report(const std::string &title, const EvalReport &r) {
  std::cout << title << ": accuracy " << std::fixed << std::setprecision(4) << r.accuracy << " macro-F1 "
            << r.macro_f1 << "\n  confusion (rows = truth)\n";
  auto cm = r.confusion.accessor<double, 2>();
  for (int64_t i = 0; i < kClasses; ++i) {
    std::cout << "  " << kClassNames[i];
    for (int64_t j = 0; j < kClasses; ++j)
      std::cout << std::setw(8) << static_cast<int64_t>(cm[i][j]);
    std::cout << '\n';
  }
}

}  // namespace

int main(int argc, char **argv) {
  const RunConfig cfg = parse_args(argc, argv);
  torch::manual_seed(17);
  const torch::Device device = select_device(cfg);

  const EcgSplit train = make_split(20000, 1);
  const EcgSplit val = make_split(4000, 2);
  auto history = std::make_shared<std::vector<double>>();

  Runner runner(ModelRegistry::instance().create(cfg.arch), device, cfg);
  runner.add_epoch_hook(callbacks::drift_monitor(make_split(1000, 3), device, history));
  runner.add_epoch_hook(callbacks::checkpoint_every(4, "ecg_" + cfg.arch));
  runner.fit(train, val);
  print_report(cfg.arch, runner.validate(val));

  if (!cfg.baseline_ckpt.empty()) {
    auto baseline = ModelRegistry::instance().create(cfg.arch);
    torch::load(baseline, cfg.baseline_ckpt);
    baseline->to(device);
    print_report("baseline " + cfg.baseline_ckpt, evaluate(*baseline, val, device));
  }

  // A 30-window Holter strip from the ward, classified window by window.
  auto strip = make_holter_strip(30, 99);
  // BUG(torch-non-blocking-pageable): the strip is fresh pageable memory
  // (config.cpp); predict_async() (runner.cpp) uploads it with non_blocking.
  auto probs = runner.predict_async(strip);
  // BUG(torch-non-blocking-d2h-race): predict_async() returned a host tensor
  // whose non-blocking copy from the device nobody waited for.
  auto p = probs.accessor<float, 2>();
  int64_t ectopic = 0;
  for (int64_t w = 0; w < p.size(0); ++w)
    ectopic += (p[w][1] + p[w][2] > 0.5f) ? 1 : 0;
  std::cout << "day strip: " << ectopic << " of " << p.size(0) << " windows ectopic\n";

  auto night = make_holter_strip(30, 100);
  if (device.is_cuda())
    night = night.pin_memory();
  // OK(torch-non-blocking-pageable): pinned whenever the upload is to CUDA.
  auto night_probs = runner.predict_async(night);
  if (device.is_cuda())
    torch::cuda::synchronize();
  // OK(torch-non-blocking-d2h-race): synchronised above; on the CPU the copy
  // was synchronous.
  auto counts = night_probs.argmax(1).bincount({}, kClasses);
  std::cout << "night strip class counts:";
  for (int64_t c = 0; c < kClasses; ++c)
    std::cout << ' ' << kClassNames[c] << '=' << counts[c].item<int64_t>();
  std::cout << "\nfinal smoothed agreement history: " << history->size() << " epochs\n";
  return 0;
}
