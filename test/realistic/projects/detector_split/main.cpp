// Entry point of the detector: train, score, freeze, predict a tile set.
#include "detector.h"

#include <iostream>

int main() {
  torch::manual_seed(11);
  const torch::Device device = pick_device();
  if (torch::cuda::is_available())
    enable_fast_kernels();

  Detector det;
  det->to(device);
  torch::optim::SGD opt(det->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9).weight_decay(1e-4));
  TrainConfig cfg;
  EpochLog log;
  train_detector(det, opt, device, cfg, log);

  {
    torch::NoGradGuard no_grad;
    std::cout << "accuracy " << evaluate_accuracy(det, device, 20) << '\n';
    freeze(det);
    auto tiles = torch::rand({512, 3, kImage, kImage}).to(device);
    auto predictions = predict_tiles(det, tiles);
    std::cout << "tile classes " << predictions.narrow(1, 0, kClasses).argmax(1).bincount() << '\n';
  }

  auto curve = log.curve();
  std::cout << "first/last loss " << curve.front() << " / " << curve.back() << '\n';
  std::cout << "matmul " << gpu_matmul_tflops() << " TFLOP/s\n";
  return 0;
}
