// Entry point of the split trainer.
#include "trainer.h"

#include <iostream>

int main() {
  torch::manual_seed(0);
  auto device = select_device();
  Trainer trainer(32, 4, device);
  if (torch::cuda::is_available())
    trainer.warm_up_gpu();
  trainer.fit(500);
  trainer.fit_fresh(100);
  double accuracy = 0;
  {
    torch::NoGradGuard no_grad;
    accuracy = trainer.evaluate(20);
  }
  std::cout << "mean loss " << trainer.meter().mean() << ", accuracy " << accuracy << '\n';
  return 0;
}
