// Fine-tuning on the site's phantoms and validation.
#include "recon.h"

#include <iostream>

void finetune(UNetLite &net, DeviceRing &inputs, DeviceRing &targets, const RunOptions &opts, torch::Device device) {
  torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(opts.lr));
  // Ground truth goes through one reused, page-locked (on GPU runs) buffer.
  auto host_target = torch::empty({opts.batch, 1, kSide, kSide}, torch::TensorOptions().pinned_memory(device.is_cuda()));
  for (int64_t step = 0; step < opts.finetune_steps; ++step) {
    auto target = phantom_batch(opts.batch, static_cast<uint64_t>(step));
    auto mask = undersample_mask(static_cast<uint64_t>(step));
    // BUG(torch-non-blocking-pageable): zero_filled() (data.cpp) returns fresh
    // pageable memory, and stage() copies it with non_blocking.
    auto x = inputs.stage(zero_filled(target, mask));
    host_target.copy_(target);
    // OK(torch-non-blocking-pageable): host_target is pinned whenever the
    // ring is on a GPU.
    auto y = targets.stage(host_target);
    // BUG(torch-eval-mode-missing): load_pretrained() (model.cpp) put the
    // network in eval mode and nothing switches it back before fine-tuning;
    // batch norm and dropout train in inference mode.
    auto recon = net->forward(x);
    auto loss = torch::nn::functional::l1_loss(recon, y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (step % 50 == 0) {
      // OK(torch-host-sync-in-loop): one step in 50.
      std::cout << "finetune step " << step << " L1 " << loss.item<double>() << '\n';
    }
  }
}

double validate(UNetLite &net, torch::Device device, int64_t batches) {
  torch::NoGradGuard no_grad;
  net->eval();
  double total_ssim = 0, total_psnr = 0;
  for (int64_t b = 0; b < batches; ++b) {
    auto target = phantom_batch(8, 50000 + static_cast<uint64_t>(b));
    auto input = zero_filled(target, undersample_mask(50000 + static_cast<uint64_t>(b))).to(device);
    // OK(torch-eval-mode-missing, torch-inference-without-no-grad): eval()
    // and the guard above.
    auto recon = net->forward(input);
    // OK(torch-device-mismatch): psnr() gets both images on the device.
    total_psnr += psnr(recon, target.to(device));
    // BUG(torch-device-mismatch): the target stays on the host; ssim()
    // (metrics.cpp) combines its two arguments.
    total_ssim += ssim(recon, target).item<double>();
  }
  std::cout << "validation PSNR " << total_psnr / static_cast<double>(batches) << " dB\n";
  return total_ssim / static_cast<double>(batches);
}
