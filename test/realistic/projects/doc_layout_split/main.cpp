// Fine-tunes the layout network, validating every epoch, calibrates the
// review threshold and segments one volume.
#include "layout.h"

#include <iostream>

int main(int argc, char **argv) {
  LayoutConfig cfg;
  const std::string checkpoint = argc > 1 ? argv[1] : "";
  torch::manual_seed(31);
  const torch::Device device = choose_device();

  LayoutNet net = build_layout_net(24, checkpoint);
  place_module(*net, device, "layout");
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(cfg.lr));

  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    const double loss = train_epoch(net, opt, cfg, device, epoch);
    const double acc = validate(net, device, cfg.val_batches);
    std::cout << "epoch " << epoch << " loss " << loss << " val pixel accuracy " << acc << '\n';
    trim_gpu_memory("epoch " + std::to_string(epoch));
  }
  torch::save(net, "layout_net.pt");

  const double review = low_confidence_fraction(net, device, 16, 0.6);
  std::cout << "pixels below 0.6 confidence: " << review * 100.0 << "%\n";
  export_volume_masks(net, device, "volume_0001");
  return 0;
}
