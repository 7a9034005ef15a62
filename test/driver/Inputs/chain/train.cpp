#include "model.h"

void step(Net &net, torch::Device device) {
  auto x = torch::randn({8, 4});
  auto y = to_device(x, device);
  auto out = net->forward(x);
}
