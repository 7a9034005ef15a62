#pragma once
namespace c10 {
class Scalar {
public:
  Scalar(int v);
  Scalar(long v);
  Scalar(double v);
  Scalar(float v);
  Scalar(bool v);
  template <class T> T to() const;
};
} // namespace c10
