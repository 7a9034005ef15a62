// Warms up the head, fine-tunes, validates each epoch, dumps the validation
// logits and labels one recorded stream.
#include "action.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <iostream>

int main(int argc, char **argv) {
  FinetuneConfig cfg;
  const std::string checkpoint = argc > 1 ? argv[1] : "";
  torch::manual_seed(11);
  const torch::Device device = training_device();
  warm_up_conv3d(cfg.batch);

  R2Plus1D net = build_model(checkpoint, device);
  try {
    warmup_head(net, cfg, device);
  } catch (const c10::OutOfMemoryError &) {
    // The shared node sometimes still holds the previous job's cache.
    // BUG(torch-empty-cache-oom-retry): the allocator already emptied its
    // cache before raising; the same warm-up at the same batch fails again.
    c10::cuda::CUDACachingAllocator::emptyCache();
    warmup_head(net, cfg, device);
  }
  set_backbone_trainable(net, true);

  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(cfg.lr).weight_decay(0.05));
  ClipSource train_source(cfg.batch, /*seed=*/1);
  for (int64_t epoch = 0; epoch < cfg.epochs; ++epoch) {
    const double loss = train_epoch(net, opt, train_source, cfg, device, epoch);
    const double top1 = evaluate(net, device, 20, 900000 + static_cast<uint64_t>(epoch) * 100);
    std::cout << "epoch " << epoch << " loss " << loss << " val top-1 " << top1 << '\n';
  }
  torch::save(net, "r2plus1d_site.pt");
  dump_val_logits(net, device, 10, "val_logits.pt");

  auto stream = synth_stream(12, /*seed=*/4242);
  // BUG(torch-device-mismatch): label_stream() (evaluate.cpp) runs the
  // network, on `device` since build_model() (model.cpp), on windows that
  // resample_clip() (clips.cpp) returns on the host.
  const auto labels = label_stream(net, stream, device);
  std::cout << "stream: " << labels.size() << " windows, first action " << labels.front() << '\n';
  return 0;
}
