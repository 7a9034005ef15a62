#include "detector.h"

torch::Tensor Detector::predict(torch::Tensor image) {
  auto out = net_->forward(image);
  return out.argmax(1);
}

torch::Tensor Detector::predict_guarded(torch::Tensor image) {
  torch::NoGradGuard no_grad;
  return net_->forward(image).argmax(1);
}
