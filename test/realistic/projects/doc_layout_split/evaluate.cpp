// Validation, the confidence calibration of the review queue, and the export
// of one volume's masks.
#include "layout.h"

#include <iostream>

double validate(LayoutNet &net, torch::Device device, int64_t batches) {
  torch::NoGradGuard no_grad;
  // Page-locked staging only where there is a GPU to copy to.
  const bool pin = device.is_cuda();
  auto host_pages = pin ? pinned_page_buffer(8) : page_buffer(8);
  double accuracy = 0.0;
  for (int64_t b = 0; b < batches; ++b) {
    auto labels = render_pages(host_pages, 700000 + static_cast<uint64_t>(b));
    // OK(torch-non-blocking-pageable): non_blocking only when the source is
    // the pinned buffer.
    auto pages = host_pages.to(device, /*non_blocking=*/pin);
    // BUG(torch-eval-mode-missing): main.cpp validates right after
    // train_epoch() (train.cpp) set the net to training mode; batch norm
    // uses the batch's statistics and updates its running ones, dropout is on.
    auto logits = net->forward(pages);
    // BUG(torch-tensor-to-discarded): the moved copy is thrown away.
    labels.to(device);
    // BUG(torch-device-mismatch): pixel_accuracy() (metrics.cpp) compares the
    // logits, on `device` since place_module() (model.cpp), with the labels
    // that render_pages() (pages.cpp) returned on the host.
    accuracy += pixel_accuracy(logits, labels);
  }
  return accuracy / static_cast<double>(batches);
}

// Fraction of pixels whose top region probability is below `threshold`:
// those pages go to the human review queue.
double low_confidence_fraction(LayoutNet &net, torch::Device device, int64_t batches, double threshold) {
  net->eval();
  auto host_pages = page_buffer(4);
  int64_t low = 0, total = 0;
  for (int64_t b = 0; b < batches; ++b) {
    render_pages(host_pages, 800000 + static_cast<uint64_t>(b));
    // BUG(torch-inference-without-no-grad): nothing is backpropagated here,
    // yet autograd records every activation of every batch.
    auto probs = torch::softmax(net->forward(host_pages.to(device)), 1);
    auto top = std::get<0>(probs.max(1));
    low += top.lt(threshold).sum().item<int64_t>();
    total += top.numel();
  }
  return static_cast<double>(low) / static_cast<double>(total);
}

void export_volume_masks(LayoutNet &net, torch::Device device, const std::string &prefix) {
  c10::InferenceMode guard;
  net->eval();
  auto host_pages = page_buffer(32);
  render_pages(host_pages, 424242);
  auto masks = segment_volume(net, host_pages.to(device)).argmax(1).to(torch::kByte);
  auto host_masks = masks.to(torch::kCPU, /*non_blocking=*/true);
  // BUG(torch-non-blocking-d2h-race): the writer reads the masks while the
  // asynchronous copy from the GPU may still be running.
  save_mask_pgms(host_masks, prefix);
  std::cout << "wrote " << host_masks.size(0) << " masks to " << prefix << "_*.pgm\n";
}
