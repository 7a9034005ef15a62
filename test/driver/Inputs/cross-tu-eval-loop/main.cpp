#include "detector.h"

// A speed test: the same image, predicted again and again.
int main() {
  Detector detector;
  auto image = torch::randn({1, 4});
  for (int i = 0; i < 10; ++i)
    detector.predict(image);
  for (int i = 0; i < 10; ++i)
    detector.predict_guarded(image);
}
