#include "server.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <fstream>
#include <iostream>

static void write_embeddings(std::ostream &out, const torch::Tensor &host) {
  auto a = host.accessor<float, 2>();
  for (int64_t i = 0; i < a.size(0); ++i)
    out << a[i][0] << '\n';
}

size_t Service::serve() {
  size_t answered = 0;
  std::ofstream out("embeddings.txt");
  while (!queue_.empty()) {
    std::vector<torch::Tensor> rows;
    while (!queue_.empty() && rows.size() < 32) {
      rows.push_back(torch::tensor(queue_.front().features));
      queue_.pop_front();
    }
    // OK(torch-inference-without-no-grad): main.cpp runs serve() under a NoGradGuard.
    auto emb = model_->forward(torch::stack(rows).to(device_));
    auto host = download(emb);
    // BUG(torch-non-blocking-d2h-race): download() (model.cpp) only started
    // the copy; write_embeddings() reads it before any synchronisation.
    write_embeddings(out, host);
    answered += rows.size();
    release_memory();
  }
  return answered;
}

// Re-embeds the stored catalogue in chunks and reports the mean norm.
double Service::reindex(int64_t chunks) {
  double norm = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    auto x = torch::randn({1024, kInputDim}, device_);
    // BUG(torch-inference-without-no-grad): main.cpp calls reindex() outside
    // its NoGradGuard block; nothing here calls backward().
    auto emb = model_->forward(x);
    norm += emb.norm(2, 1).mean().item<double>();
  }
  return norm / static_cast<double>(chunks);
}

torch::Tensor Service::embed_catalogue(const torch::Tensor &catalogue) {
  torch::NoGradGuard no_grad;
  auto x = catalogue.to(device_);
  try {
    return embed(model_, x);
  } catch (const c10::OutOfMemoryError &) {
    // BUG(torch-empty-cache-oom-retry): embed() is retried on the same
    // catalogue at the same size.
    c10::cuda::CUDACachingAllocator::emptyCache();
    return embed(model_, x);
  }
}
