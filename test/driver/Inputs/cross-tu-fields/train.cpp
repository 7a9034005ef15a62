#include "data.h"

void fit(torch::Device device) {
  Net net;
  net->to(device);
  auto batch = make_batch(8);
  net->forward(batch.x.to(device));
  net->forward(batch.x);
  Batch filled;
  fill_batch(filled, 8, device);
  net->forward(filled.x);
  net->forward(filled.y);
}
