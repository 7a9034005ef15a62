// Device selection and the GPU memory helpers. The segmentation job shares
// its card with the OCR service, which watches nvidia-smi before it admits
// new documents.
#include "layout.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <iostream>

torch::Device choose_device() {
  // OK(torch-cuda-unguarded): a CPU fallback on the other side.
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

// Hands the allocator's cached blocks back to the driver so that the OCR
// service sees them free.
void trim_gpu_memory(const std::string &phase) {
  if (!torch::cuda::is_available())
    return;
  // BUG(torch-empty-cache-in-loop): main.cpp calls this after every epoch;
  // each call synchronises and cudaFrees the cache that the next epoch has
  // to cudaMalloc again, at the same peak.
  c10::cuda::CUDACachingAllocator::emptyCache();
  std::cout << "[mem] cache trimmed after " << phase << '\n';
}

torch::Tensor segment_volume(LayoutNet &net, const torch::Tensor &pages) {
  try {
    // OK(torch-eval-mode-missing): its one caller, export_volume_masks()
    // (evaluate.cpp), calls eval() and holds an InferenceMode guard.
    return net->forward(pages);
  } catch (const c10::OutOfMemoryError &e) {
    std::cerr << "volume of " << pages.size(0) << " pages ran out of memory, retrying\n";
    // BUG(torch-empty-cache-oom-retry): the caching allocator already freed
    // its cache before it raised; the same volume at the same size needs
    // the same memory and fails again.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return net->forward(pages);
  }
}
