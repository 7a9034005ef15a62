#include "data.h"

int main() {
  Trainer trainer{torch::Device(torch::kCUDA)};
  trainer.fit_fresh(10);
}
