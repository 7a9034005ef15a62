// Fine-tunes the pretrained de-aliasing network on the site's phantoms,
// validates it, and reconstructs one 32-slice volume.
#include "recon.h"

#include <iostream>

int main(int argc, char **argv) {
  RunOptions opts;
  if (argc > 1)
    opts.checkpoint = argv[1];
  torch::manual_seed(5);
  // OK(torch-cuda-unguarded): a CPU fallback on the other side.
  const torch::Device device = torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);

  if (torch::cuda::is_available()) {
    auto maps = estimate_coil_maps(calibration_scan(/*seed=*/1));
    std::cout << "coil QA: mean sensitivity " << maps.abs().mean().item<double>() << '\n';
  }

  UNetLite net = load_pretrained(opts.checkpoint, device);
  DeviceRing inputs(3, opts.batch, device), targets(3, opts.batch, device);
  finetune(net, inputs, targets, opts, device);
  std::cout << "validation SSIM " << validate(net, device, 10) << '\n';
  torch::save(net, "unet_site.pt");

  auto volume = phantom_batch(32, /*seed=*/777);
  auto slices = zero_filled(volume, undersample_mask(777));
  auto recon = reconstruct_volume(net, slices);
  torch::save(recon, "volume_recon.pt");
  return 0;
}
