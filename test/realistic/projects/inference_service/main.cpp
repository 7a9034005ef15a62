#include "server.h"

#include <iostream>

int main() {
  torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
  if (torch::cuda::device_count() >= 2)
    device = replica_device();
  Service service(load_embedder(device), device);
  for (int64_t i = 0; i < 1000; ++i)
    service.submit({i, std::vector<float>(kInputDim, static_cast<float>(i % 13) / 13.0f)});
  size_t answered = 0;
  {
    torch::NoGradGuard no_grad;
    answered = service.serve();
  }
  std::cout << answered << " queries answered\n";
  std::cout << "catalogue norm " << service.reindex(8) << '\n';
  auto all = service.embed_catalogue(torch::randn({100000, kInputDim}));
  std::cout << "catalogue embedded: " << all.sizes() << '\n';
  return 0;
}
