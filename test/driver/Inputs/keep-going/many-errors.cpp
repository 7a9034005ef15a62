// More errors than clang reports (-ferror-limit, 20): it stops reporting,
// not reading, so the includes after them still count.
#include <Eigen/Dense>
void step_1() { undeclared_1(); }
void step_2() { undeclared_2(); }
void step_3() { undeclared_3(); }
void step_4() { undeclared_4(); }
void step_5() { undeclared_5(); }
void step_6() { undeclared_6(); }
void step_7() { undeclared_7(); }
void step_8() { undeclared_8(); }
void step_9() { undeclared_9(); }
void step_10() { undeclared_10(); }
void step_11() { undeclared_11(); }
void step_12() { undeclared_12(); }
void step_13() { undeclared_13(); }
void step_14() { undeclared_14(); }
void step_15() { undeclared_15(); }
void step_16() { undeclared_16(); }
void step_17() { undeclared_17(); }
void step_18() { undeclared_18(); }
void step_19() { undeclared_19(); }
void step_20() { undeclared_20(); }
void step_21() { undeclared_21(); }
void step_22() { undeclared_22(); }
void step_23() { undeclared_23(); }
void step_24() { undeclared_24(); }
#include <torch/torch.h>

void train(torch::Tensor x) { x.cuda(); }
