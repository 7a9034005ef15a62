#include <Eigen/Dense>

void step() { undeclared_function(); }
